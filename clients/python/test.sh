#!/usr/bin/env bash
# Runs the Python client's checks (clients/run-tests convention):
#
# 1. the package the way a user installs it: `pip install .` into a fresh
#    venv (pip upgraded first, as a user's would be), its metadata checked
#    (licence, author, project URLs, version), and, when LC_TEST_ADDRESS is
#    set, every ```python block of README.md run verbatim with that venv's
#    Python against the server (LC_ADDRESS=$LC_TEST_ADDRESS), the cluster
#    (LC_CLUSTER=$LC_TEST_CLUSTER) and the mutual-TLS server (LC_TLS_ADDRESS,
#    LC_CA, LC_CLIENT_CERT, LC_CLIENT_KEY from $LC_TEST_MTLS_ADDRESS and
#    $LC_TEST_TLS_DIR);
# 2. pytest over src/: the shared wire vectors, the answer mapping against a
#    scripted socket and, when LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS /
#    LC_SERVER_BIN are set, v1 and sessions against real servers; with the
#    fixture's LC_TEST_CLUSTER* / LC_TEST_TLS* / LC_TEST_MTLS_ADDRESS, the
#    cluster (failover, Reissue) and TLS tests, which fail under CI=true when
#    those are not set.
#
# The last output line is pytest's summary; exit 77 when the toolchain is
# missing.
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v python3 >/dev/null 2>&1; then
  echo "skipped: python3 not found"; exit 77
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "skipped: python3 >= 3.11 needed, found $(python3 -V 2>&1)"; exit 77
fi
if ! python3 -c 'import pytest' >/dev/null 2>&1; then
  echo "skipped: pytest is not installed (run ci-setup.sh)"; exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== pip install . into a fresh venv"
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
if ! "$py" -m pip install --quiet --disable-pip-version-check --upgrade pip >"$work/pip.log" 2>&1 ||
   ! "$py" -m pip install --quiet --disable-pip-version-check . >>"$work/pip.log" 2>&1; then
  cat "$work/pip.log"
  echo "0 passed, 1 failed (pip install)"
  exit 1
fi
rm -rf build src/*.egg-info
"$py" -m pip show locking-center
if ! "$py" - <<'PY'; then
import importlib.metadata as md
import sys

m = md.metadata("locking-center")
want = {
    "Version": "0.2.0",
    "License-Expression": "MIT",
    "Author": "The Locking-Center authors",
}
bad = ["%s: %r, want %r" % (k, m.get(k), v) for k, v in want.items() if m.get(k) != v]
urls = dict(u.split(", ", 1) for u in m.get_all("Project-URL") or [])
if urls.get("Repository") != "https://github.com/locking-center/locking-center":
    bad.append("Project-URL Repository: %r" % urls.get("Repository"))
if not m.get("Summary"):
    bad.append("no Summary")
files = [str(f) for f in md.files("locking-center")]
if not any(f.endswith("LICENSE") for f in files) or not any(f.endswith("py.typed") for f in files):
    bad.append("LICENSE or py.typed not installed: %s" % files)
if bad:
    sys.exit("metadata: " + "; ".join(bad))
print("metadata complete: licence, author, project URLs, version, LICENSE and py.typed installed")
PY
  echo "0 passed, 1 failed (metadata)"
  exit 1
fi

if [ -n "${LC_TEST_ADDRESS:-}" ]; then
  echo "== README examples, verbatim, with the installed package"
  tls_dir=${LC_TEST_TLS_DIR:-}
  if ! (cd "$work" && LC_ADDRESS="$LC_TEST_ADDRESS" LC_CLUSTER="${LC_TEST_CLUSTER:-$LC_TEST_ADDRESS}" \
        LC_TLS_ADDRESS="${LC_TEST_MTLS_ADDRESS:-}" LC_CA="${tls_dir:+$tls_dir/ca.pem}" \
        LC_CLIENT_CERT="${tls_dir:+$tls_dir/client.pem}" LC_CLIENT_KEY="${tls_dir:+$tls_dir/client-key.pem}" \
        "$py" - "$OLDPWD/README.md" <<'PY'); then
import os
import re
import subprocess
import sys

text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
assert blocks, "no python block in README.md"
for i, code in enumerate(blocks, 1):
    if "LC_TLS_ADDRESS" in code and not (os.environ["LC_TLS_ADDRESS"] and os.environ["LC_CA"]):
        if os.environ.get("CI") == "true":
            sys.exit("README block %d needs the TLS fixture (LC_TEST_MTLS_ADDRESS, LC_TEST_TLS_DIR); CI=true" % i)
        print("README block %d NOT RUN: LC_TEST_MTLS_ADDRESS / LC_TEST_TLS_DIR not set" % i)
        continue
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit("README block %d failed:\n%s\n%s%s" % (i, code, r.stdout, r.stderr))
    print("README block %d ran: %s" % (i, (r.stdout.strip().splitlines() or ["(no output)"])[-1]))
PY
    echo "0 passed, 1 failed (README examples)"
    exit 1
  fi
fi

echo "== pytest"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
python3 -m pytest -p no:cacheprovider -rs "$@"
