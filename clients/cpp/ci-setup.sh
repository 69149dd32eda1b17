#!/usr/bin/env bash
# Installs what the C++ client's tests need: a C++17 compiler, cmake (ctest)
# and GoogleTest (Debian's libgtest-dev). Idempotent; quick when present.
set -euo pipefail
need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
if ! ls /usr/lib/*/libgtest.a /usr/lib/libgtest.a /usr/local/lib/libgtest.a >/dev/null 2>&1; then
  need+=(libgtest-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
