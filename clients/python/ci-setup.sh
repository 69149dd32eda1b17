#!/usr/bin/env bash
# Installs what the Python client's tests need: python3 (>= 3.11), and pytest
# in the project's venv .ci/tools/venv (.ci/python-venv), not the machine's
# Python. Idempotent; does nothing when both are already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)

if ! command -v python3 >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
fi
"$root/.ci/python-venv" pytest
py="$root/.ci/tools/venv/bin/python"
echo "python client: $("$py" -V 2>&1), pytest $("$py" -c 'import pytest; print(pytest.__version__)')"
