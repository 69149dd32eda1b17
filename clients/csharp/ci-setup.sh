#!/usr/bin/env bash
# Installs what the C# client's tests need on a fresh machine: Mono's C# compiler and runtime
# (Debian package mono-mcs, which pulls in mono-runtime and the 4.5 class libraries). The .NET SDK
# is not needed. The TLS tests also use the openssl command (a PKCS#12 client certificate; RSA
# certificates when the fixture's are ECDSA, which Mono cannot verify). Idempotent; returns at once
# when mcs, mono and openssl are already there.
set -euo pipefail

need=()
if ! command -v mcs >/dev/null 2>&1 || ! command -v mono >/dev/null 2>&1; then need+=(mono-mcs); fi
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
