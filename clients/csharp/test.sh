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
# IAsyncDisposable: in Mono's mscorlib since Mono 6; compiled in when this Mono has it.
defines=()
printf 'class P { static System.Type T = typeof(System.IAsyncDisposable); static void Main() {} }\n' >"$out/probe.cs"
if mcs -out:"$out/probe.exe" "$out/probe.cs" >/dev/null 2>&1; then
  defines+=(-define:LC_ASYNC_DISPOSABLE)
fi
# The library: warnings are errors, and every public member needs its XML doc comment (CS1591).
if ! mcs -target:library -langversion:7 -warnaserror+ "${defines[@]}" \
    -out:"$out/LockingCenter.dll" -doc:"$out/LockingCenter.xml" \
    src/LockingCenter/*.cs; then
  echo "0 passed, 1 failed (library did not compile)"
  exit 1
fi
if ! mcs -target:exe -langversion:7 -nowarn:1591 "${defines[@]}" -out:"$out/LockingCenter.Tests.exe" -r:"$out/LockingCenter.dll" \
    tests/LockingCenter.Tests/*.cs tests/MonoRunner/*.cs; then
  echo "0 passed, 1 failed (tests did not compile)"
  exit 1
fi
cd "$out" && exec mono --debug LockingCenter.Tests.exe "$@"
