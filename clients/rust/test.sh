#!/usr/bin/env bash
# Runs the Rust client's tests with cargo (see ../run-tests for the
# convention). Vector and stand-in-server tests always run; the conformance
# tests need LC_TEST_ADDRESS (and LC_TEST_WEB_ADDRESS for the JSON API
# checks) and return early without it. The last line is the summed count
# of cargo's "test result:" lines.
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
trap 'rm -f "$log"' EXIT

# No dependencies: --locked --offline never needs a registry.
cargo test --locked --offline 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

summary=$(awk '/^test result:/ {
    for (i = 1; i <= NF; i++) {
      if ($(i+1) ~ /^passed/) p += $i
      if ($(i+1) ~ /^failed/) f += $i
      if ($(i+1) ~ /^ignored/) s += $i
    }
  } END { printf "%d passed, %d failed, %d skipped", p, f, s }' "$log")
if [ "$rc" -ne 0 ] && [ "${summary#*passed, 0 failed}" != "$summary" ]; then
  # A build error: no "test result" line counted the failure.
  echo "cargo test exited $rc before its tests ran"
  summary=$(sed 's/passed, 0 failed/passed, 1 failed/' <<<"$summary")
fi
echo "$summary"
exit "$rc"
