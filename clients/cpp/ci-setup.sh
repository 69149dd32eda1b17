#!/usr/bin/env bash
# Installs what the C++ client's tests need: a C and C++17 compiler with the
# sanitizer runtimes, cmake (ctest), pkg-config (the package check),
# GoogleTest (Debian's libgtest-dev) and OpenSSL's headers (TLS, through the C
# library; Debian's libssl-dev). Idempotent; quick when present.
set -euo pipefail
need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v pkg-config >/dev/null 2>&1 || need+=(pkgconf)
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then
  need+=(libssl-dev)
fi
if ! ls /usr/lib/*/libgtest.a /usr/lib/libgtest.a /usr/local/lib/libgtest.a >/dev/null 2>&1; then
  need+=(libgtest-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
