#!/usr/bin/env bash
# Builds the C# client with Mono's compiler (mcs), once per API surface of its two targets, compiles
# the README's quick start against it (and runs it when a server is given), then builds the tests and
# runs them with the small runner in tests/MonoRunner (see clients/run-tests for the convention). The
# .NET SDK is not needed and not used; where it is installed, `dotnet test tests/LockingCenter.Tests`
# runs the same test files under xunit. Arguments: substrings of test names to run (the quick start
# is then not run). Last line: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v mcs >/dev/null 2>&1 || ! command -v mono >/dev/null 2>&1; then
  echo "skipped: Mono's mcs and mono are needed (run ./ci-setup.sh: apt-get install mono-mcs)"
  exit 77
fi

: "${LC_VECTORS:=$(cd ../.. && pwd)/wire/testdata/vectors.json}"
export LC_VECTORS

out=build
mkdir -p "$out"
# IAsyncDisposable: in Mono's mscorlib since Mono 6; compiled in when this Mono has it.
defines=()
printf 'class P { static System.Type T = typeof(System.IAsyncDisposable); static void Main() {} }\n' >"$out/probe.cs"
if mcs -out:"$out/probe.exe" "$out/probe.cs" >/dev/null 2>&1; then
  defines+=(-define:LC_ASYNC_DISPOSABLE)
fi
# The library, once per API surface of the project file's two targets: without IAsyncDisposable
# (netstandard2.0) and with it (netstandard2.1, when this Mono has it). Warnings are errors, and every
# public member needs its XML doc comment (CS1591), as TreatWarningsAsErrors and
# GenerateDocumentationFile ask of the SDK build.
if ! mcs -target:library -langversion:7 -warnaserror+ -out:"$out/LockingCenter.netstandard2.0.dll" \
    src/LockingCenter/*.cs; then
  echo "0 passed, 1 failed (library did not compile without IAsyncDisposable)"
  exit 1
fi
if ! mcs -target:library -langversion:7 -warnaserror+ "${defines[@]}" \
    -out:"$out/LockingCenter.dll" -doc:"$out/LockingCenter.xml" \
    src/LockingCenter/*.cs; then
  echo "0 passed, 1 failed (library did not compile)"
  exit 1
fi
if ! mcs -target:exe -langversion:7 -nowarn:1591 "${defines[@]}" -out:"$out/LockingCenter.Tests.exe" \
    -r:"$out/LockingCenter.dll" -r:System.Xml.dll \
    tests/LockingCenter.Tests/*.cs tests/MonoRunner/*.cs; then
  echo "0 passed, 1 failed (tests did not compile)"
  exit 1
fi

# The README's quick start, verbatim, as a program of its own against the library.
quick=0
awk '/^<!-- quickstart -->/{f=1;next} /^<!-- \/quickstart -->/{f=0} f && !/^```/' README.md >"$out/Quickstart.cs"
if ! grep -q 'class Quickstart' "$out/Quickstart.cs" \
    || ! mcs -langversion:7 -out:"$out/Quickstart.exe" -r:"$out/LockingCenter.dll" "$out/Quickstart.cs"; then
  echo "quickstart: the README's quick start did not compile"
  quick=1
elif [ -n "${LC_TEST_ADDRESS:-}" ] && [ $# -eq 0 ]; then
  if qout=$(cd "$out" && LC_ADDRESS=$LC_TEST_ADDRESS timeout 60 mono Quickstart.exe 2>&1) \
      && grep -q '^holding reports/daily with token [0-9][0-9]*$' <<<"$qout"; then
    echo "quickstart: $qout"
  else
    echo "$qout"
    echo "quickstart: the README's quick start failed"
    quick=1
  fi
fi

(cd "$out" && mono --debug LockingCenter.Tests.exe "$@") >"$out/tests.log" 2>&1
rc=$?
grep -v '^[0-9]* passed, ' "$out/tests.log"
read -r passed failed skipped < <(tail -n 1 "$out/tests.log" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/p')
if [ -z "${passed:-}" ]; then
  tail -n 20 "$out/tests.log"
  echo "0 passed, 1 failed (the test runner did not finish)"
  exit 1
fi
# The quick start counts as one test when it was built (and run, with a server).
if [ "$quick" -ne 0 ]; then failed=$((failed + 1)); else passed=$((passed + 1)); fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
