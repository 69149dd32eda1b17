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

# The README's cluster and TLS examples, verbatim, built like the quick start and run against the
# fixture (a failure counts as one failed test; without the fixture they skip, but fail under CI=true).
examples_failed=0 examples_passed=0 examples_skipped=0
own_tls=()
stop_own_tls() { for pid in "${own_tls[@]}"; do kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; }
trap stop_own_tls EXIT
example() { # marker class env...
  local marker=$1 class=$2; shift 2
  awk -v b="<!-- $marker -->" -v e="<!-- /$marker -->" '$0 == b {f=1; next} $0 == e {f=0} f && !/^```/' README.md >"$out/$class.cs"
  if ! grep -q "class $class" "$out/$class.cs" || ! mcs -langversion:7 -out:"$out/$class.exe" -r:"$out/LockingCenter.dll" "$out/$class.cs"; then
    echo "example: the README's $marker did not compile"; examples_failed=$((examples_failed + 1)); return
  fi
  local eout
  if eout=$(cd "$out" && env "$@" timeout 60 mono "$class.exe" 2>&1) && grep -q 'with token [0-9]' <<<"$eout"; then
    echo "example: $marker: $eout"; examples_passed=$((examples_passed + 1))
  else
    echo "$eout"; echo "example: the README's $marker failed"; examples_failed=$((examples_failed + 1))
  fi
}
missing() { # name
  if [ "${CI:-}" = "true" ]; then echo "example: $1 not set under CI=true"; examples_failed=$((examples_failed + 1));
  else echo "SKIP example: $1 not set"; examples_skipped=$((examples_skipped + 1)); fi
}
if [ $# -eq 0 ]; then
  if [ -n "${LC_TEST_CLUSTER:-}" ]; then example cluster-example ClusterExample LC_CLUSTER="$LC_TEST_CLUSTER"; else missing LC_TEST_CLUSTER; fi
  if [ -n "${LC_TEST_TLS_ADDRESS:-}" ] && [ -n "${LC_TEST_MTLS_ADDRESS:-}" ] && [ -n "${LC_TEST_TLS_DIR:-}" ]; then
    tdir=$LC_TEST_TLS_DIR tls=$LC_TEST_TLS_ADDRESS mtls=$LC_TEST_MTLS_ADDRESS
    if openssl x509 -in "$tdir/ca.pem" -noout -text | grep -q id-ecPublicKey; then
      # Mono cannot verify ECDSA certificates: RSA ones, and TLS servers of our own.
      tdir=$(pwd)/$out/tls; rm -rf "$tdir"; mkdir -p "$tdir"
      (cd "$tdir" && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >san.cnf && printf 'extendedKeyUsage=clientAuth\n' >client.cnf &&
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=lc-cs-ca &&
        openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=localhost &&
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile san.cnf &&
        openssl req -newkey rsa:2048 -nodes -keyout client-key.pem -out client.csr -subj /CN=lc-cs-client &&
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out client.pem -days 2 -extfile client.cnf) >/dev/null 2>&1
      port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
      tp=$(port); mp=$(port)
      BIND_ADDRESS=127.0.0.1:$tp WEB_ADDRESS=off TLS_CERT=$tdir/server.pem TLS_KEY=$tdir/server-key.pem "$LC_SERVER_BIN" >"$tdir/tls.log" 2>&1 &
      own_tls+=($!)
      BIND_ADDRESS=127.0.0.1:$mp WEB_ADDRESS=off TLS_CERT=$tdir/server.pem TLS_KEY=$tdir/server-key.pem TLS_CLIENT_CA=$tdir/ca.pem "$LC_SERVER_BIN" >"$tdir/mtls.log" 2>&1 &
      own_tls+=($!)
      for _ in $(seq 1 100); do
        (exec 3<>/dev/tcp/127.0.0.1/$tp) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$mp) 2>/dev/null && break
        sleep 0.1
      done
      tls=127.0.0.1:$tp mtls=127.0.0.1:$mp
      echo "example: the fixture's certificates are ECDSA, which Mono cannot verify: the TLS example runs against RSA servers of its own"
    fi
    openssl pkcs12 -export -keypbe PBE-SHA1-3DES -certpbe PBE-SHA1-3DES -macalg sha1 -passout pass:example \
      -in "$tdir/client.pem" -inkey "$tdir/client-key.pem" -out "$out/client.p12"
    example tls-example TlsExample LC_ADDRESS="$tls" LC_TLS_CA="$tdir/ca.pem"
    example tls-example TlsExample LC_ADDRESS="$mtls" LC_TLS_CA="$tdir/ca.pem" LC_TLS_CLIENT_P12="$(pwd)/$out/client.p12" LC_TLS_CLIENT_P12_PASSWORD=example
  else
    missing LC_TEST_TLS_ADDRESS
  fi
  stop_own_tls; own_tls=()
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
passed=$((passed + examples_passed)); failed=$((failed + examples_failed)); skipped=$((skipped + examples_skipped))
echo "$passed passed, $failed failed, $skipped skipped"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
