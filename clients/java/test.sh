#!/usr/bin/env bash
# Runs the Java client's JUnit suite with Maven (see clients/run-tests for the convention), then
# checks the package the way a user consumes it. The suite: the shared vectors ($LC_VECTORS),
# client behaviour against loopback stand-ins, and, when $LC_TEST_ADDRESS is set, conformance and
# sessions against the real server (servers of its own from $LC_SERVER_BIN for restarts and expiry);
# with $LC_TEST_CLUSTER / $LC_TEST_CLUSTER_CONTROL a 3-node cluster (failover, lost answer, a
# follower's address), with $LC_TEST_TLS_ADDRESS / $LC_TEST_MTLS_ADDRESS / $LC_TEST_TLS_DIR TLS
# (skipped without them, failed under CI=true).
# The package check: `mvn install` (jar, -sources and -javadoc jars, a POM with licence, url, scm),
# then a fresh Maven project that depends on io.lockingcenter:locking-center as the README says and
# runs the README's quick start, cluster and TLS examples verbatim against the server, the cluster
# and the mutual-TLS server. Last line: the counts.
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

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/mvn.log
# install = test + the three jars + install into the local repository, as a user would.
mvn -B -ntp install >"$log" 2>&1
rc=$?
# Per-class results, failures and the figures the tests print, without Maven's noise.
grep -E '^\[(INFO|WARNING|ERROR)\] (Tests run:|  |Failures:|Errors:|Run |.*FAIL)|<<<|Exception|expected|^(v1|session): ' "$log" \
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
passed=$((run - failed - skipped))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  tail -n 40 "$log"
  echo "maven failed after the tests (exit $rc)"
  failed=$((failed + 1))
fi

# ---- the package, as a user consumes it
package_check() {
  local version repo dir
  version=$(sed -n 's|^  <version>\(.*\)</version>|\1|p' pom.xml | head -n 1)
  repo=$HOME/.m2/repository
  dir=$repo/io/lockingcenter/locking-center/$version
  for f in "locking-center-$version.jar" "locking-center-$version-sources.jar" "locking-center-$version-javadoc.jar" "locking-center-$version.pom"; do
    [ -s "$dir/$f" ] || { echo "package: $dir/$f was not installed"; return 1; }
  done
  for tag in '<url>https://github.com/locking-center/locking-center</url>' '<name>MIT</name>' '<scm>' '<description>'; do
    grep -qF "$tag" "$dir/locking-center-$version.pom" || { echo "package: the POM lacks $tag"; return 1; }
  done
  jar tf "$dir/locking-center-$version-sources.jar" | grep -q 'io/lockingcenter/Session.java' \
    || { echo "package: the sources jar lacks Session.java"; return 1; }
  jar tf "$dir/locking-center-$version-javadoc.jar" | grep -q 'io/lockingcenter/Session.html' \
    || { echo "package: the javadoc jar lacks Session.html"; return 1; }

  # A fresh project: the README's dependency block and its quick start, verbatim.
  local app=$work/app
  mkdir -p "$app/src/main/java"
  awk '/^<!-- dependency -->/{f=1;next} /^<!-- \/dependency -->/{f=0} f && !/^```/' README.md >"$work/dependency.xml"
  awk '/^<!-- quickstart -->/{f=1;next} /^<!-- \/quickstart -->/{f=0} f && !/^```/' README.md >"$app/src/main/java/Quickstart.java"
  awk '/^<!-- cluster -->/{f=1;next} /^<!-- \/cluster -->/{f=0} f && !/^```/' README.md >"$app/src/main/java/Cluster.java"
  awk '/^<!-- tls -->/{f=1;next} /^<!-- \/tls -->/{f=0} f && !/^```/' README.md >"$app/src/main/java/TlsExample.java"
  grep -q '<artifactId>locking-center</artifactId>' "$work/dependency.xml" || { echo "package: no dependency block in the README"; return 1; }
  grep -q 'class Quickstart' "$app/src/main/java/Quickstart.java" || { echo "package: no quick start in the README"; return 1; }
  {
    printf '<project xmlns="http://maven.apache.org/POM/4.0.0">\n  <modelVersion>4.0.0</modelVersion>\n'
    printf '  <groupId>example</groupId><artifactId>app</artifactId><version>1</version>\n'
    printf '  <properties><maven.compiler.release>17</maven.compiler.release>'
    printf '<project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>\n'
    printf '  <build><plugins><plugin><groupId>org.apache.maven.plugins</groupId>'
    printf '<artifactId>maven-compiler-plugin</artifactId><version>3.14.0</version></plugin></plugins></build>\n'
    printf '  <dependencies>\n'; cat "$work/dependency.xml"; printf '  </dependencies>\n</project>\n'
  } >"$app/pom.xml"
  (cd "$app" && mvn -B -q -ntp -o package >"$work/app.log" 2>&1) \
    || (cd "$app" && mvn -B -q -ntp package >"$work/app.log" 2>&1) \
    || { cat "$work/app.log"; echo "package: the fresh project did not build"; return 1; }
  if [ -n "${LC_TEST_ADDRESS:-}" ]; then
    local out
    out=$(cd "$app" && LC_ADDRESS=$LC_TEST_ADDRESS timeout 60 java -cp "target/classes:$dir/locking-center-$version.jar" Quickstart 2>&1) \
      || { echo "$out"; echo "package: the quick start failed"; return 1; }
    echo "$out" | sed 's/^/quickstart: /'
    grep -q '^holding reports/daily with token [0-9][0-9]*$' <<<"$out" || { echo "package: unexpected quick start output"; return 1; }
  fi
  if [ -n "${LC_TEST_CLUSTER:-}" ]; then
    out=$(cd "$app" && LC_ADDRESS=$LC_TEST_CLUSTER timeout 60 java -cp "target/classes:$dir/locking-center-$version.jar" Cluster 2>&1) \
      || { echo "$out"; echo "package: the cluster example failed"; return 1; }
    echo "$out" | sed 's/^/cluster example: /'
    grep -q '^holding reports/daily with token [0-9][0-9]*$' <<<"$out" || { echo "package: unexpected cluster example output"; return 1; }
  fi
  if [ -n "${LC_TEST_MTLS_ADDRESS:-}" ] && [ -n "${LC_TEST_TLS_DIR:-}" ]; then
    out=$(cd "$app" && LC_ADDRESS=$LC_TEST_MTLS_ADDRESS LC_TLS_CA=$LC_TEST_TLS_DIR/ca.pem LC_TLS_CERT=$LC_TEST_TLS_DIR/client.pem \
      LC_TLS_KEY=$LC_TEST_TLS_DIR/client-key.pem timeout 60 java -cp "target/classes:$dir/locking-center-$version.jar" TlsExample 2>&1) \
      || { echo "$out"; echo "package: the TLS example failed"; return 1; }
    echo "$out" | sed 's/^/tls example: /'
    grep -q '^holding reports/daily over TLS with token [0-9][0-9]*$' <<<"$out" || { echo "package: unexpected TLS example output"; return 1; }
    grep -q '^holding reports/daily over TLS (v1)$' <<<"$out" || { echo "package: the TLS example's v1 request printed nothing"; return 1; }
  fi
  echo "package: installed $version (jar, sources, javadoc; POM with licence, url, scm); a fresh project built and ran the README's examples"
}
if package_check; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
