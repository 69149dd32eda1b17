#!/usr/bin/env bash
# Runs the Python client's tests (clients/run-tests convention): the shared
# wire vectors, the answer mapping against a scripted socket, and, when
# LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS are set, conformance against the
# real server.  The last output line is pytest's summary; exit 77 when the
# toolchain is missing.
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v python3 >/dev/null 2>&1; then
  echo "skipped: python3 not found"; exit 77
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
  echo "skipped: python3 >= 3.9 needed, found $(python3 -V 2>&1)"; exit 77
fi
if ! python3 -c 'import pytest' >/dev/null 2>&1; then
  echo "skipped: pytest is not installed (run ci-setup.sh)"; exit 77
fi

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
exec python3 -m pytest -p no:cacheprovider -rs "$@"
