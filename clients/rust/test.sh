#!/usr/bin/env bash
# Runs the Rust client's tests the way a user of the crate gets them (see
# ../run-tests for the convention):
#   1. `cargo package` builds the .crate and verifies that it compiles on its
#      own; its manifest must draw no warning (description, licence,
#      documentation, repository) and it must ship neither test.sh nor
#      ci-setup.sh, but its tests and their copy of the vectors;
#   2. the .crate is unpacked into a temporary folder and `cargo test` runs
#      there: unit, vector, stand-in-server, v1 conformance and session tests.
# The conformance and session tests need LC_TEST_ADDRESS (LC_TEST_WEB_ADDRESS
# for the JSON API checks, LC_SERVER_BIN for restarts and expiry) and return
# early without them. The last line is the summed count of cargo's
# "test result:" lines.
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
for must in Cargo.toml LICENSE README.md src/lib.rs src/session.rs tests/vectors.json tests/session.rs; do
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
  CARGO_TARGET_DIR="$target_dir" cargo test --locked --offline 2>&1) | tee "$log"
rc=${PIPESTATUS[0]}

# The README's quick-start, pasted into a fresh project that depends on the
# unpacked crate, run against the server.
if [ "$rc" -eq 0 ] && [ -n "${LC_TEST_ADDRESS:-}" ]; then
  fresh="$unpacked/fresh"
  cargo new --quiet --vcs none "$fresh" || rc=1
  printf 'locking-center = { path = "%s" }\n' "$unpacked/locking-center-$version" >>"$fresh/Cargo.toml"
  awk '/<!-- quickstart -->/ {q=1; next} q && /^```rust/ {p=1; next} p && /^```/ {exit} p' README.md >"$fresh/src/main.rs"
  if (cd "$fresh" && CARGO_TARGET_DIR="$target_dir" LC_ADDRESS="$LC_TEST_ADDRESS" cargo run --quiet --offline 2>&1); then
    echo "test result: ok. 1 passed; 0 failed; 0 ignored (README quick-start in a fresh project)" | tee -a "$log"
  else
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored (README quick-start in a fresh project)" | tee -a "$log"
    rc=1
  fi
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
