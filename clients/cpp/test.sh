#!/usr/bin/env bash
# Tests of the C++ client, run by clients/run-tests (see its header comment).
# Builds the GoogleTest suite under AddressSanitizer + UBSan and runs it with
# ctest. Conformance tests need LC_TEST_ADDRESS (and LC_TEST_WEB_ADDRESS) and
# skip themselves without it. LC_SANITIZE=0 builds without sanitizers.
# Last line: "cpp: N passed, N failed, N skipped" from ctest's counts.
set -uo pipefail
cd "$(dirname "$0")"

for tool in c++ cmake ctest; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "skipped: $tool not found (run ci-setup.sh)"
    exit 77
  fi
done

export LC_VECTORS="${LC_VECTORS:-$(cd ../.. && pwd)/wire/testdata/vectors.json}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
sanitize=ON
[ "${LC_SANITIZE:-1}" = "0" ] && sanitize=OFF

mkdir -p build
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug -DLC_SANITIZE=$sanitize >build/configure.log 2>&1; then
  cat build/configure.log
  if grep -q 'GTest' build/configure.log; then
    echo "skipped: GoogleTest not found (run ci-setup.sh: apt-get install libgtest-dev)"
    exit 77
  fi
  echo "cpp: 0 passed, 1 failed"
  exit 1
fi
if ! cmake --build build -j 2; then
  echo "cpp: 0 passed, 1 failed"
  exit 1
fi

(cd build && ctest --output-on-failure) | tee build/ctest.log
status=${PIPESTATUS[0]}
line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' build/ctest.log | tail -n 1)
if [ -z "$line" ]; then
  echo "cpp: 0 passed, 1 failed"
  exit 1
fi
total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
skipped=$(grep -c '\*\*\*Skipped' build/ctest.log || true)
echo "cpp: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit "$status"
