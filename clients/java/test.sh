#!/usr/bin/env bash
# Runs the Java client's JUnit suite with Maven (see clients/run-tests for the convention):
# the shared vectors ($LC_VECTORS), client behaviour against a loopback stand-in, and, when
# $LC_TEST_ADDRESS is set, conformance against the real server. Last line: the counts.
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "skipped: java 17 and maven are needed (run ./ci-setup.sh)"
  exit 77
fi
major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
if [ -z "$major" ] || [ "${major%%.*}" -lt 17 ]; then
  echo "skipped: java 17 or newer is needed (found ${major:-none})"
  exit 77
fi

: "${LC_VECTORS:=$(cd ../.. && pwd)/wire/testdata/vectors.json}"
export LC_VECTORS

log=$(mktemp)
trap 'rm -f "$log"' EXIT
mvn -B -ntp test >"$log" 2>&1
rc=$?
# Per-class results and failures, without Maven's download and plugin noise.
grep -E '^\[(INFO|WARNING|ERROR)\] (Tests run:|  |Failures:|Errors:|Run |.*FAIL)|<<<|Exception|expected' "$log" \
  | grep -v 'Tests run: [0-9]*, Failures: [0-9]*, Errors: [0-9]*, Skipped: [0-9]*$' || true
summary=$(grep -E 'Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' "$log" | tail -n 1 \
  | sed 's/^\[[A-Z]*\] //')
if [ -z "$summary" ]; then
  tail -n 40 "$log"
  echo "maven failed before running the tests (exit $rc)"
  exit 1
fi
echo "$summary"
read -r run failures errors skipped < <(echo "$summary" | sed -E 's/[^0-9]+/ /g')
failed=$((failures + errors))
echo "$((run - failed - skipped)) passed, $failed failed, $skipped skipped"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
