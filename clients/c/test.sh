#!/usr/bin/env bash
# Tests of the C client, run by clients/run-tests (see its header comment).
# Two CMake builds, each tested with ctest: a normal one and one under
# AddressSanitizer + UndefinedBehaviorSanitizer. Conformance tests need
# LC_TEST_ADDRESS (and LC_TEST_WEB_ADDRESS) and skip themselves without it.
# Last line: "c: N passed, N failed, N skipped" summed over both builds.
set -uo pipefail
cd "$(dirname "$0")"

for tool in cc cmake ctest; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "skipped: $tool not found (run ci-setup.sh)"
    exit 77
  fi
done

export LC_VECTORS="${LC_VECTORS:-$(cd ../.. && pwd)/wire/testdata/vectors.json}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

passed=0 failed=0 skipped=0 status=0
run_build() {
  local dir=$1; shift
  echo "== $dir"
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"; status=1; failed=$((failed + 1)); return
  fi
  if ! cmake --build "$dir" -j 2; then
    status=1; failed=$((failed + 1)); return
  fi
  (cd "$dir" && ctest --output-on-failure) | tee "$dir/ctest.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  local line total f s
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$dir/ctest.log" | tail -n 1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  f=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
  s=$(grep -c '\*\*\*Skipped' "$dir/ctest.log" || true)
  if [ -z "$line" ]; then status=1; failed=$((failed + 1)); return; fi
  passed=$((passed + total - f - s)); failed=$((failed + f)); skipped=$((skipped + s))
}

mkdir -p build build-asan
run_build build
run_build build-asan -DLC_SANITIZE=ON

echo "c: $passed passed, $failed failed, $skipped skipped"
exit $status
