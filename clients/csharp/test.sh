#!/usr/bin/env bash
# Builds the C# client and its tests with Mono's compiler (mcs) and runs them with the small runner
# in tests/MonoRunner (see clients/run-tests for the convention). The .NET SDK is not needed; where it
# is installed, `dotnet test tests/LockingCenter.Tests` runs the same test files under xunit.
# Last line: "N passed, N failed, N skipped".
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
# The library: warnings are errors, and every public member needs its XML doc comment (CS1591).
if ! mcs -target:library -langversion:7 -warnaserror+ -out:"$out/LockingCenter.dll" -doc:"$out/LockingCenter.xml" \
    src/LockingCenter/*.cs; then
  echo "0 passed, 1 failed (library did not compile)"
  exit 1
fi
if ! mcs -target:exe -langversion:7 -nowarn:1591 -out:"$out/LockingCenter.Tests.exe" -r:"$out/LockingCenter.dll" \
    tests/LockingCenter.Tests/*.cs tests/MonoRunner/*.cs; then
  echo "0 passed, 1 failed (tests did not compile)"
  exit 1
fi
cd "$out" && exec mono --debug LockingCenter.Tests.exe "$@"
