#!/usr/bin/env bash
# Runs the Rust client's tests the way a user of the crate gets them (see
# ../run-tests for the convention):
#   1. `cargo package` builds the .crate and verifies that it compiles on its
#      own; its manifest must draw no warning (description, licence,
#      documentation, repository) and it must ship neither test.sh nor
#      ci-setup.sh, but its tests and their copy of the vectors;
#   2. the .crate is unpacked into a temporary folder and `cargo test
#      --features tls` runs there: unit, vector, stand-in-server, v1
#      conformance, session, cluster and TLS tests;
#   3. the README's quick-start, cluster and TLS examples, each pasted into a
#      fresh project, run against the server, the cluster and the mTLS server.
# The conformance and session tests need LC_TEST_ADDRESS (LC_TEST_WEB_ADDRESS
# for the JSON API checks, LC_SERVER_BIN for restarts and expiry) and return
# early without them. The cluster tests need LC_TEST_CLUSTER and
# LC_TEST_CLUSTER_CONTROL (LC_TEST_LOST_ANSWER_PREFIX), the TLS tests
# LC_TEST_TLS_ADDRESS, LC_TEST_MTLS_ADDRESS and LC_TEST_TLS_DIR: without them
# they print SKIPPED and pass, except under CI=true, where they fail. The
# last line is the summed count of cargo's "test result:" lines.
set -uo pipefail
cd "$(dirname "$0")"

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (clients/rust/ci-setup.sh)"
  exit 77
fi

# The crate needs Rust 1.70 or newer (Cargo.toml rust-version).
minor=$(rustc --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\).*/\1/p')
if [ -z "$minor" ] || [ "$minor" -lt 70 ]; then
  echo "rustc 1.70 or newer needed, found: $(rustc --version 2>&1 | head -n 1)"
  exit 77
fi

export LC_VECTORS="${LC_VECTORS:-$(cd ../.. && pwd)/wire/testdata/vectors.json}"
log=$(mktemp)
unpacked=$(mktemp -d)
trap 'rm -rf "$log" "$unpacked"' EXIT

fail() {
  echo "$1"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
}

# The shipped copy of the vectors must be the repository's file.
cmp -s tests/vectors.json "$LC_VECTORS" || fail "tests/vectors.json differs from $LC_VECTORS: copy it again"
cmp -s LICENSE ../../LICENSE || fail "LICENSE differs from the repository's: copy it again"

# The dev-dependencies (serde_json, tokio) come from the crate registry once;
# everything after runs offline.
cargo fetch --locked >/dev/null 2>&1 || fail "cargo fetch --locked failed (registry unreachable, or Cargo.lock out of date)"

# --allow-dirty: the check is of the files as they are, committed or not.
pkg_log=$(cargo package --locked --offline --allow-dirty 2>&1)
pkg_rc=$?
printf '%s\n' "$pkg_log" | grep -v '^ *\(Compiling\|Downloaded\|Locking\)' | tail -n 8
[ "$pkg_rc" -eq 0 ] || fail "cargo package failed"
if grep -qi '^warning' <<<"$pkg_log"; then
  fail "cargo package warned: $(grep -i '^warning' <<<"$pkg_log" | head -n 3)"
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
crate="target/package/locking-center-$version.crate"
listing=$(tar tzf "$crate") || fail "cannot read $crate"
for must in Cargo.toml LICENSE README.md src/lib.rs src/session.rs src/conn.rs src/tls.rs tests/vectors.json tests/session.rs tests/cluster.rs tests/tls.rs; do
  grep -qx "locking-center-$version/$must" <<<"$listing" || fail "$crate lacks $must"
done
if grep -Eq '/(test\.sh|ci-setup\.sh)$' <<<"$listing"; then
  fail "$crate ships a test runner script"
fi
echo "packaged $crate: $(wc -l <<<"$listing") files, no scripts"

# The tests, from the unpacked crate (LC_VECTORS still points at the
# repository's file, so the shipped copy is compared with it too).
# The build cache of the dependencies stays in this folder's target/, so
# reruns compile little. -m: the files get the time of unpacking (the .crate
# carries fixed times), so the crate itself is always compiled afresh.
tar xzmf "$crate" -C "$unpacked"
target_dir="$PWD/target/unpacked"
(cd "$unpacked/locking-center-$version" &&
  CARGO_TARGET_DIR="$target_dir" cargo test --locked --offline --features tls -- --show-output 2>&1) | tee "$log"
rc=${PIPESTATUS[0]}

# A README example (the rust block after <!-- MARKER -->), pasted into a fresh
# project that depends on the unpacked crate (with FEATURES), run with the
# environment given after the first three arguments.
readme_example() {
  local marker=$1 features=$2 what=$3 fresh="$unpacked/fresh-$1"
  shift 3
  cargo new --quiet --vcs none "$fresh" || return 1
  printf 'locking-center = { path = "%s"%s }\n' "$unpacked/locking-center-$version" "$features" >>"$fresh/Cargo.toml"
  awk -v m="<!-- $marker -->" '$0 == m {q=1; next} q && /^```rust/ {p=1; next} p && /^```/ {exit} p' README.md >"$fresh/src/main.rs"
  if (cd "$fresh" && env CARGO_TARGET_DIR="$target_dir" "$@" cargo run --quiet --offline 2>&1); then
    echo "test result: ok. 1 passed; 0 failed; 0 ignored (README $what in a fresh project)" | tee -a "$log"
  else
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored (README $what in a fresh project)" | tee -a "$log"
    return 1
  fi
}
if [ "$rc" -eq 0 ] && [ -n "${LC_TEST_ADDRESS:-}" ]; then
  readme_example quickstart "" quick-start LC_ADDRESS="$LC_TEST_ADDRESS" || rc=1
fi
if [ "$rc" -eq 0 ] && [ -n "${LC_TEST_CLUSTER:-}" ]; then
  readme_example cluster "" "cluster example" LC_ADDRESS="$LC_TEST_CLUSTER" || rc=1
fi
if [ "$rc" -eq 0 ] && [ -n "${LC_TEST_MTLS_ADDRESS:-}" ] && [ -n "${LC_TEST_TLS_DIR:-}" ]; then
  readme_example tls ', features = ["tls"]' "TLS example" LC_ADDRESS="$LC_TEST_MTLS_ADDRESS" \
    LC_TLS_CA="$LC_TEST_TLS_DIR/ca.pem" LC_TLS_CERT="$LC_TEST_TLS_DIR/client.pem" \
    LC_TLS_KEY="$LC_TEST_TLS_DIR/client-key.pem" || rc=1
fi

# An ignored test whose reason says it runs as a child process is a
# helper another test starts (with --ignored --exact), not a check left out:
# it is counted apart.
summary=$(awk '/^test .* \.\.\. ignored, run as a child process/ { h++ }
  /^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/) p += $i
      if ($(i+1) ~ /^failed/) f += $i
      if ($(i+1) ~ /^ignored/) s += $i
    }
  } END {
    printf "%d passed, %d failed, %d skipped", p, f, s - h
    if (h) printf " (and %d helpers run as child processes by the tests that need them)", h
  }' "$log")
if [ "$rc" -ne 0 ] && [ "${summary#*passed, 0 failed}" != "$summary" ]; then
  # A build error: no "test result" line counted the failure.
  echo "cargo test exited $rc before its tests ran"
  summary=$(sed 's/passed, 0 failed/passed, 1 failed/' <<<"$summary")
fi
echo "$summary"
exit "$rc"
