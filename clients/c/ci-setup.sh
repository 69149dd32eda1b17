#!/usr/bin/env bash
# Installs what the C client's tests need: a C compiler with the sanitizer
# runtimes (ASan, UBSan, TSan ship with gcc), make, cmake (ctest),
# pkg-config (the package check) and OpenSSL's headers (TLS; the library
# builds without them, but the TLS tests need them). Idempotent; does
# nothing when all is there.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkgconf)
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then
  need+=(libssl-dev)
fi
if command -v cc >/dev/null 2>&1; then
  for san in address,undefined thread; do
    if ! echo 'int main(void){return 0;}' | cc -x c -fsanitize=$san -o /dev/null - >/dev/null 2>&1; then
      need+=(build-essential)
    fi
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
