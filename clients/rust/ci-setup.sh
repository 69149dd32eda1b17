#!/usr/bin/env bash
# Makes sure a Rust toolchain (cargo, rustc) is there for clients/rust.
# Idempotent and quick when Rust is already installed (machines of this kind
# come with it, installed by rustup). The crate has no dependencies, so
# nothing is fetched from the crate registry.
set -euo pipefail

if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
  exit 0
fi
if command -v rustup >/dev/null 2>&1; then
  rustup toolchain install stable --profile minimal
  exit 0
fi
# Fallback: Debian's packaged toolchain (test.sh checks it is new enough).
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq cargo rustc >/dev/null
