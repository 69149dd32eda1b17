#!/usr/bin/env bash
# Runs the JavaScript client's checks (clients/run-tests convention):
# `tsc --noEmit` over index.d.ts and a usage file, then `node --test` over the
# shared wire vectors, the answer mapping against a scripted socket and, when
# LC_TEST_ADDRESS / LC_TEST_WEB_ADDRESS are set, conformance against the real
# server. The last line is "N passed, N failed[, N skipped]" from node's TAP
# summary; exit 77 when the toolchain is missing.
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

count() { sed -n "s/^# $1 \([0-9][0-9]*\)$/\1/p" "$out" | tail -n 1; }
pass=$(count pass) fail=$(count fail) skipped=$(count skipped)
cancelled=$(count cancelled)
fail=$(( ${fail:-0} + ${cancelled:-0} ))
if [ -z "$pass" ]; then
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
