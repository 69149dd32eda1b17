#!/usr/bin/env bash
# Installs what the C# client's tests need on a fresh machine: Mono's C# compiler and runtime
# (Debian package mono-mcs, which pulls in mono-runtime and the 4.5 class libraries). The .NET SDK
# is not needed. Idempotent; returns at once when mcs and mono are already there.
set -euo pipefail

if command -v mcs >/dev/null 2>&1 && command -v mono >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends mono-mcs
