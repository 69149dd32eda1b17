#!/usr/bin/env bash
# Installs what the Python client's tests need: python3 (>= 3.11) and pytest.
# Idempotent; does nothing when both are already there.
set -euo pipefail

if ! command -v python3 >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip >/dev/null
fi
if ! python3 -c 'import pytest' >/dev/null 2>&1; then
  python3 -m pip install --quiet pytest || python3 -m pip install --quiet --break-system-packages pytest
fi
echo "python client: $(python3 -V 2>&1), pytest $(python3 -c 'import pytest; print(pytest.__version__)')"
