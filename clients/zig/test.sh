#!/usr/bin/env bash
# Runs the Zig client's tests with `zig build test` (see ../run-tests for
# the convention), using the Zig pinned in ci-setup.sh (PyPI's ziglang,
# run as `python3 -m ziglang`). Unit, vector and stand-in-server tests always
# run; the conformance and session tests need LC_TEST_ADDRESS (and
# LC_TEST_WEB_ADDRESS for the JSON API checks, LC_SERVER_BIN for restarts
# and expiry) and are skipped without it; the TLS tests need the fixture's
# LC_TEST_TLS_ADDRESS, LC_TEST_MTLS_ADDRESS and LC_TEST_TLS_DIR. Then the
# package check: a fresh
# `zig init` project fetches a tarball of this folder and runs the README's
# quick-start. The last line sums the build summary's test counts and the
# package check.
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

# The package as a user gets it: a tarball of what build.zig.zon lists,
# fetched into a fresh `zig init` project, whose main.zig is the README's
# quick-start, run against the server. Counted as one more test.
package_check() {
  local work fresh
  work=$(mktemp -d)
  fresh="$work/fresh"
  # The quick-start in the README is examples/example.zig, verbatim.
  awk '/<!-- quickstart -->/ {q=1; next} q && /^```zig/ {p=1; next} p && /^```/ {exit} p' README.md >"$work/quickstart.zig"
  if ! cmp -s "$work/quickstart.zig" examples/example.zig; then
    echo "package check: the README quick-start differs from examples/example.zig"
    rm -rf "$work"; return 1
  fi
  grep -q '\.license = "MIT"' build.zig.zon || { echo "package check: no licence in build.zig.zon"; rm -rf "$work"; return 1; }
  tar czf "$work/locking_center.tar.gz" --transform 's,^,locking_center/,' \
    build.zig build.zig.zon src examples README.md LICENSE || { rm -rf "$work"; return 1; }
  mkdir "$fresh"
  (
    set -e
    cd "$fresh"
    python3 -m ziglang init >/dev/null 2>&1
    python3 -m ziglang fetch --save=locking_center "file://$work/locking_center.tar.gz"
    sed -i 's|^    b.installArtifact(exe);|    const lc_dep = b.dependency("locking_center", .{ .target = target, .optimize = optimize });\n    exe.root_module.addImport("locking_center", lc_dep.module("locking_center"));\n    b.installArtifact(exe);|' build.zig
    grep -q 'lc_dep.module' build.zig
    cp "$work/quickstart.zig" src/main.zig
    if [ -n "${LC_TEST_ADDRESS:-}" ]; then
      LC_ADDRESS="$LC_TEST_ADDRESS" python3 -m ziglang build run
    else
      python3 -m ziglang build
    fi
  ) 2>&1
  local r=$?
  rm -rf "$work"
  return $r
}
if [ "$rc" -eq 0 ]; then
  if package_check; then
    echo "package check passed: fetched by a fresh zig init project, quick-start ran"
    pkg_passed=1 pkg_failed=0
  else
    echo "package check FAILED"
    pkg_passed=0 pkg_failed=1 rc=1
  fi
else
  pkg_passed=0 pkg_failed=0
fi

# The README's cluster example is examples/cluster.zig, verbatim, run against
# the fixture's cluster (one more test; without the fixture a skip, a failure
# under CI=true).
ex_passed=0 ex_failed=0 ex_skipped=0
awk '/<!-- cluster-example -->/ {q=1; next} q && /^```zig/ {p=1; next} p && /^```/ {exit} p' README.md >"$log.cluster.zig"
if ! cmp -s "$log.cluster.zig" examples/cluster.zig; then
  echo "cluster example: the README block differs from examples/cluster.zig"; ex_failed=1 rc=1
elif [ -n "${LC_TEST_CLUSTER:-}" ]; then
  if out=$(LC_CLUSTER="$LC_TEST_CLUSTER" python3 -m ziglang build cluster-example 2>&1) && grep -q 'with token [0-9]' <<<"$out"; then
    echo "cluster example: $out"; ex_passed=1
  else
    echo "$out"; echo "cluster example FAILED"; ex_failed=1 rc=1
  fi
elif [ "${CI:-}" = "true" ]; then
  echo "cluster example: LC_TEST_CLUSTER not set under CI=true"; ex_failed=1 rc=1
else
  echo "SKIP cluster example: LC_TEST_CLUSTER not set"; ex_skipped=1
fi
rm -f "$log.cluster.zig"

# The README's TLS example is examples/tls.zig, verbatim, run against the
# fixture's TLS server by its name "localhost" (the name checked is the host
# dialled) with the fixture's CA (one more test; a skip without the fixture,
# a failure under CI=true).
tls_passed=0 tls_failed=0 tls_skipped=0
awk '/<!-- tls-example -->/ {q=1; next} q && /^```zig/ {p=1; next} p && /^```/ {exit} p' README.md >"$log.tls.zig"
if ! cmp -s "$log.tls.zig" examples/tls.zig; then
  echo "TLS example: the README block differs from examples/tls.zig"; tls_failed=1 rc=1
elif [ -n "${LC_TEST_TLS_ADDRESS:-}" ] && [ -n "${LC_TEST_TLS_DIR:-}" ]; then
  if out=$(LC_ADDRESS="localhost:${LC_TEST_TLS_ADDRESS##*:}" LC_CA_FILE="$LC_TEST_TLS_DIR/ca.pem" \
      python3 -m ziglang build tls-example 2>&1) && grep -q 'over TLS with token [0-9]' <<<"$out"; then
    echo "TLS example: $out"; tls_passed=1
  else
    echo "$out"; echo "TLS example FAILED"; tls_failed=1 rc=1
  fi
elif [ "${CI:-}" = "true" ]; then
  echo "TLS example: LC_TEST_TLS_ADDRESS not set under CI=true"; tls_failed=1 rc=1
else
  echo "SKIP TLS example: LC_TEST_TLS_ADDRESS not set"; tls_skipped=1
fi
rm -f "$log.tls.zig"

# "Build Summary: 6/6 steps succeeded; 31/33 tests passed; 2 skipped; 1 failed"
line=$(grep 'Build Summary:' "$log" | tail -n 1)
passed=$(sed -n 's#.* \([0-9][0-9]*\)/[0-9][0-9]* tests passed.*#\1#p' <<<"$line")
skipped=$(sed -n 's#.*tests passed.*; \([0-9][0-9]*\) skipped.*#\1#p' <<<"$line")
failed=$(sed -n 's#.*tests passed.*; \([0-9][0-9]*\) failed.*#\1#p' <<<"$line")
passed=${passed:-0} skipped=${skipped:-0} failed=${failed:-0}
passed=$((passed + pkg_passed + ex_passed + tls_passed)) failed=$((failed + pkg_failed + ex_failed + tls_failed))
skipped=$((skipped + ex_skipped + tls_skipped))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "zig build test exited $rc (a build step failed before its tests ran)"
  failed=1
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
