#!/usr/bin/env bash
# Installs the pinned Zig for clients/zig: PyPI's ziglang package, which
# carries the official Zig toolchain and runs as `python3 -m ziglang`, into
# the project's venv .ci/tools/venv (.ci/python-venv), not the machine's
# Python. Idempotent: nothing is fetched when that version is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

zig_version=0.15.2
"$root/.ci/python-venv" "ziglang==$zig_version"
"$root/.ci/tools/venv/bin/python" -m ziglang version
