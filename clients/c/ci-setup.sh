#!/usr/bin/env bash
# Installs what the C client's tests need: a C compiler, make, cmake (ctest).
# Idempotent; does nothing when everything is there.
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v make >/dev/null 2>&1 || need+=(make)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
# The sanitizer runtimes ship with gcc (libasan, libubsan); check they link.
if command -v cc >/dev/null 2>&1; then
  if ! echo 'int main(void){return 0;}' | cc -x c -fsanitize=address,undefined -o /dev/null - >/dev/null 2>&1; then
    need+=(build-essential)
  fi
fi
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
