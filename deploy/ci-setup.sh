#!/usr/bin/env bash
# Installs what deploy/test.sh needs beyond Go: promtool, from Debian's
# prometheus package. Idempotent: does nothing when promtool is on PATH.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
	echo "ci-setup: $(promtool --version 2>&1 | head -n1)"
	exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null

# Only promtool is wanted. Where the package's init script started a
# Prometheus server, stop it (and keep it from starting at boot).
if command -v service >/dev/null 2>&1 && service prometheus status >/dev/null 2>&1; then
	service prometheus stop || true
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
	systemctl disable --now prometheus || true
fi

command -v promtool >/dev/null 2>&1 || { echo "ci-setup: promtool still missing after installing prometheus" >&2; exit 1; }
echo "ci-setup: installed $(promtool --version 2>&1 | head -n1)"
