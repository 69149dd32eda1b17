#!/usr/bin/env bash
# Tests of the C client, run by clients/run-tests (see its header comment).
#
# 1. Three CMake builds with TLS, each tested with ctest (one ctest test per
#    case): build/ (plain, shared library), build-asan/ (AddressSanitizer +
#    LeakSanitizer + UBSan), build-tsan/ (ThreadSanitizer); and build-notls/
#    (-DLC_WITH_TLS=OFF), whose v1, session and TLS cases must pass too.
#    Conformance tests need LC_TEST_ADDRESS (and LC_TEST_WEB_ADDRESS,
#    LC_SERVER_BIN) and skip themselves without them; the cluster and TLS
#    cases need the fixture's LC_TEST_CLUSTER, LC_TEST_CLUSTER_CONTROL,
#    LC_TEST_LOST_ANSWER_PREFIX, LC_TEST_TLS_ADDRESS, LC_TEST_MTLS_ADDRESS and
#    LC_TEST_TLS_DIR, skip loudly without them, and fail under CI=true.
# 2. The package, checked as a user installs it: cmake --install into a
#    temporary prefix; the SONAME is versioned; a fresh project made of the
#    README's CMakeLists.txt (find_package(lockingcenter 0.3)) and its
#    quick-start builds and runs against the server (find_package(lockingcenter
#    0.4) must fail); the same program built with pkg-config only; the
#    README's cluster and TLS examples built with pkg-config and run against
#    the fixture's cluster and TLS servers.
# Last line: "c: N passed, N failed, N skipped" summed over all of it.
set -uo pipefail
cd "$(dirname "$0")"
here=$(pwd)

for tool in cc cmake ctest; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "skipped: $tool not found (run ci-setup.sh)"
    exit 77
  fi
done

export LC_VECTORS="${LC_VECTORS:-$(cd ../.. && pwd)/wire/testdata/vectors.json}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"

passed=0 failed=0 skipped=0 status=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); status=1; }
pass() { echo "ok   $*"; passed=$((passed + 1)); }

run_build() { # dir [ctest -R regex] -- cmake args...
  local dir=$1; shift
  local only=
  if [ "${1:-}" != "--" ]; then only=$1; fi
  shift; [ "${1:-}" = "--" ] && shift
  echo "== $dir"
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"; fail "$dir: configure"; return
  fi
  if ! cmake --build "$dir" -j 2 >"$dir/build.log" 2>&1; then
    cat "$dir/build.log"; fail "$dir: build"; return
  fi
  if grep -q 'warning:' "$dir/build.log"; then
    grep 'warning:' "$dir/build.log"; fail "$dir: compiler warnings"
  fi
  (cd "$dir" && ctest -j 2 --output-on-failure ${only:+-R "$only"}) >"$dir/ctest.log" 2>&1
  local rc=$?
  cat "$dir/ctest.log"
  # What the cluster cases measured (ctest shows a passing case's output only
  # in its log): the failover time the client saw.
  grep -h -e 'failover:' -e 'lost answer:' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sed "s|^ *|$dir: |"
  [ "$rc" -eq 0 ] || status=1
  local line total f s
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$dir/ctest.log" | tail -n 1)
  if [ -z "$line" ]; then fail "$dir: no ctest summary"; return; fi
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
  s=$(grep -c '\*\*\*Skipped' "$dir/ctest.log" || true)
  passed=$((passed + total - f - s)); failed=$((failed + f)); skipped=$((skipped + s))
}

run_build build -- -DLC_WITH_TLS=ON -DCMAKE_INSTALL_PREFIX="$here/build/prefix"
run_build build-asan -- -DLC_WITH_TLS=ON -DLC_SANITIZE=address
run_build build-tsan -- -DLC_WITH_TLS=ON -DLC_SANITIZE=thread
# Without OpenSSL: it builds, says so, and works over TCP.
run_build build-notls '^(vector_|address|lock_unlock|session_basics|session_threads|tls_)' -- -DLC_WITH_TLS=OFF
if grep -q 'lockingcenter: TLS off' build-notls/configure.log; then
  pass "build-notls: configure says TLS off"
else
  fail "build-notls: configure does not say TLS off"
fi

# ---- the package, as a user installs it --------------------------------
echo "== package"
prefix=$here/build/prefix
work=$here/build/consumer
rm -rf "$prefix" "$work"
mkdir -p "$work/cmake-project" "$work/cmake-too-new"
if cmake --install build >"$work/install.log" 2>&1; then pass "cmake --install"; else cat "$work/install.log"; fail "cmake --install"; fi
so=$(ls "$prefix"/lib*/liblockingcenter.so.0.3.0 2>/dev/null | head -n 1)
if [ -n "$so" ] && readelf -d "$so" | grep -q 'SONAME.*\[liblockingcenter\.so\.0\.3\]'; then
  pass "SONAME liblockingcenter.so.0.3"
else
  fail "no liblockingcenter.so.0.3.0 with SONAME liblockingcenter.so.0.3 under $prefix"
fi

# The README's quick-start, verbatim: the C block after "<!-- quick-start -->".
awk '/<!-- quick-start -->/{f=1; next} f && /^```c/{p=1; next} p && /^```/{exit} p' README.md >"$work/main.c"
if [ ! -s "$work/main.c" ]; then fail "README quick-start not found"; fi
cp "$work/main.c" "$work/cmake-project/main.c"
# The README's CMakeLists.txt, verbatim: its first cmake block.
awk '/^```cmake/{p=1; next} p && /^```/{exit} p' README.md >"$work/cmake-project/CMakeLists.txt"
sed 's/lockingcenter 0.3 REQUIRED/lockingcenter 0.4 REQUIRED/' "$work/cmake-project/CMakeLists.txt" >"$work/cmake-too-new/CMakeLists.txt"
cp "$work/main.c" "$work/cmake-too-new/main.c"

run_quickstart() { # name binary
  if [ -z "${LC_TEST_ADDRESS:-}" ]; then
    echo "skip $1: LC_TEST_ADDRESS not set"; skipped=$((skipped + 1)); return
  fi
  local out
  if out=$(LC_ADDRESS="$LC_TEST_ADDRESS" "$2" 2>&1) && grep -q 'fencing token' <<<"$out"; then
    pass "$1 ran against the server: $out"
  else
    echo "$out"; fail "$1 did not run"
  fi
}

if cmake -S "$work/cmake-project" -B "$work/cmake-project/build" -DCMAKE_PREFIX_PATH="$prefix" \
     >"$work/cmake-project.log" 2>&1 && cmake --build "$work/cmake-project/build" >>"$work/cmake-project.log" 2>&1; then
  pass "find_package(lockingcenter 0.3) in a fresh project"
  run_quickstart "quick-start (CMake)" "$work/cmake-project/build/app"
else
  cat "$work/cmake-project.log"; fail "find_package(lockingcenter 0.3) in a fresh project"
fi
if cmake -S "$work/cmake-too-new" -B "$work/cmake-too-new/build" -DCMAKE_PREFIX_PATH="$prefix" \
     >"$work/cmake-too-new.log" 2>&1; then
  fail "find_package(lockingcenter 0.4) accepted version 0.3.0"
else
  pass "find_package(lockingcenter 0.4) refused (the version file works)"
fi

if command -v pkg-config >/dev/null 2>&1; then
  pc=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
  if [ "$(PKG_CONFIG_PATH=$pc pkg-config --modversion lockingcenter 2>/dev/null)" = "0.3.0" ] &&
     cc -std=c99 -o "$work/quickstart-pc" "$work/main.c" $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs lockingcenter) \
       -Wl,-rpath,"$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir lockingcenter)" 2>"$work/pc.log"; then
    pass "pkg-config lockingcenter 0.3.0 builds the quick-start"
    run_quickstart "quick-start (pkg-config)" "$work/quickstart-pc"
  else
    cat "$work/pc.log" 2>/dev/null; fail "pkg-config lockingcenter"
  fi
else
  echo "skip pkg-config: not installed"; skipped=$((skipped + 1))
fi

# ---- the README's cluster and TLS examples -------------------------------
in_ci() { [ "${CI:-}" = "true" ]; }
# example name marker env...: builds the C block after marker with
# pkg-config and runs it with the environment given.
run_example() {
  local name=$1 marker=$2; shift 2
  awk -v m="<!-- $marker -->" '$0 == m {f=1; next} f && /^```c/{p=1; next} p && /^```/{exit} p' README.md >"$work/$marker.c"
  if [ ! -s "$work/$marker.c" ]; then fail "README $marker not found"; return; fi
  local pc out
  pc=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
  if ! cc -std=c99 -o "$work/$marker" "$work/$marker.c" $(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs lockingcenter) \
       -Wl,-rpath,"$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir lockingcenter)" 2>"$work/$marker.log"; then
    cat "$work/$marker.log"; fail "README $name does not build"; return
  fi
  if out=$(env "$@" "$work/$marker" 2>&1) && grep -q 'fencing token' <<<"$out"; then
    pass "README $name ran: $out"
  else
    echo "$out"; fail "README $name did not run"
  fi
}
if [ -n "${LC_TEST_CLUSTER:-}" ]; then
  run_example "cluster example" cluster-example LC_CLUSTER="$LC_TEST_CLUSTER"
elif in_ci; then
  fail "README cluster example: LC_TEST_CLUSTER not set under CI=true"
else
  echo "SKIP README cluster example: LC_TEST_CLUSTER not set"; skipped=$((skipped + 1))
fi
if [ -n "${LC_TEST_TLS_ADDRESS:-}" ] && [ -n "${LC_TEST_MTLS_ADDRESS:-}" ]; then
  d=${LC_TEST_TLS_DIR:-}
  run_example "TLS example" tls-example LC_ADDRESS="$LC_TEST_TLS_ADDRESS" LC_TLS_CA="$d/ca.pem"
  run_example "TLS example (mutual TLS)" tls-example LC_ADDRESS="$LC_TEST_MTLS_ADDRESS" \
    LC_TLS_CA="$d/ca.pem" LC_TLS_CERT="$d/client.pem" LC_TLS_KEY="$d/client-key.pem"
elif in_ci; then
  fail "README TLS example: LC_TEST_TLS_ADDRESS not set under CI=true"
else
  echo "SKIP README TLS example: LC_TEST_TLS_ADDRESS not set"; skipped=$((skipped + 1))
fi

echo "c: $passed passed, $failed failed, $skipped skipped"
exit $status
