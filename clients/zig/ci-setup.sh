#!/usr/bin/env bash
# Installs the pinned Zig for clients/zig: PyPI's ziglang package, which
# carries the official Zig toolchain and runs as `python3 -m ziglang`.
# Idempotent: nothing is fetched when that version is already installed.
set -euo pipefail

zig_version=0.15.2
if [ "$(python3 -m ziglang version 2>/dev/null || true)" = "$zig_version" ]; then
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check "ziglang==$zig_version"
python3 -m ziglang version
