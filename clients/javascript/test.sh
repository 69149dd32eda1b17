#!/usr/bin/env bash
# Runs the JavaScript client's checks (clients/run-tests convention):
# `tsc --noEmit` over index.d.ts and a usage file (lib ES2022, no @types);
# `node --test` over the shared wire vectors, the answer mapping against a
# scripted socket and, when LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS /
# LC_SERVER_BIN are set, v1 and sessions against real servers, and with the
# fixture's LC_TEST_CLUSTER* / LC_TEST_TLS* / LC_TEST_MTLS_ADDRESS the
# cluster (failover, Reissue) and TLS tests, which fail under CI=true when
# those are not set; then the
# package the way a user gets it (package-check.sh: npm pack, install into a
# fresh TypeScript 5.9 project, tsc --strict with no @types, the README's
# examples run). The last line is "N passed, N failed[, N skipped]" (node's
# TAP summary plus one for the package check); exit 77 when the toolchain is
# missing.
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1; then
  echo "skipped: node not found"; exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "skipped: Node.js >= 20 needed, found $(node --version)"; exit 77
fi
if [ ! -x node_modules/.bin/tsc ]; then
  echo "skipped: typescript is not installed (run ci-setup.sh)"; exit 77
fi

echo "== tsc --noEmit"
if ! node_modules/.bin/tsc --noEmit -p .; then
  echo "type check failed"
  echo "0 passed, 1 failed"
  exit 1
fi

echo "== node --test"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
node --test --test-reporter=tap test/*.test.js 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

echo "== package check"
./package-check.sh
pkg_rc=$?

count() { sed -n "s/^# $1 \([0-9][0-9]*\)$/\1/p" "$out" | tail -n 1; }
pass=$(count pass) fail=$(count fail) skipped=$(count skipped)
if [ "$pkg_rc" -eq 0 ]; then pass=$(( ${pass:-0} + 1 )); else fail=$(( ${fail:-0} + 1 )); fi
cancelled=$(count cancelled)
fail=$(( ${fail:-0} + ${cancelled:-0} ))
if ! grep -q '^# pass ' "$out"; then
  echo "node --test printed no summary"
  echo "0 passed, 1 failed"
  exit 1
fi
if [ "$fail" -ne 0 ]; then
  # Repeat the failures next to the counts (the harness shows only the tail).
  echo "== failures"
  awk '/^ *not ok /{show=1} show{print} show && /^ *\.\.\.$/{show=0}' "$out" |
    grep -vE '^ +(at |async |process\.processTicks)' | head -n 80
fi
if [ "${skipped:-0}" -gt 0 ]; then
  echo "$pass passed, $fail failed, $skipped skipped"
else
  echo "$pass passed, $fail failed"
fi
if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then exit 1; fi
exit 0
