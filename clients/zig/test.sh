#!/usr/bin/env bash
# Runs the Zig client's tests with `zig build test` (see ../run-tests for
# the convention), using the Zig pinned in ci-setup.sh (PyPI's ziglang,
# run as `python3 -m ziglang`). Unit, vector and stand-in-server tests always
# run; the conformance tests need LC_TEST_ADDRESS (and LC_TEST_WEB_ADDRESS
# for the JSON API checks) and are skipped without it. The last line sums
# the build summary's test counts.
set -uo pipefail
cd "$(dirname "$0")"

zig_version=0.15.2
have=$(python3 -m ziglang version 2>/dev/null || true)
if [ "$have" != "$zig_version" ]; then
  echo "Zig $zig_version not found (python3 -m ziglang gave '${have:-nothing}'): run clients/zig/ci-setup.sh"
  exit 77
fi

export LC_VECTORS="${LC_VECTORS:-$(cd ../.. && pwd)/wire/testdata/vectors.json}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

python3 -m ziglang build test --summary all 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# "Build Summary: 6/6 steps succeeded; 31/33 tests passed; 2 skipped; 1 failed"
line=$(grep 'Build Summary:' "$log" | tail -n 1)
passed=$(sed -n 's#.* \([0-9][0-9]*\)/[0-9][0-9]* tests passed.*#\1#p' <<<"$line")
skipped=$(sed -n 's#.*tests passed.*; \([0-9][0-9]*\) skipped.*#\1#p' <<<"$line")
failed=$(sed -n 's#.*tests passed.*; \([0-9][0-9]*\) failed.*#\1#p' <<<"$line")
passed=${passed:-0} skipped=${skipped:-0} failed=${failed:-0}
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "zig build test exited $rc (a build step failed before its tests ran)"
  failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
