#!/usr/bin/env bash
# Installs what deploy/test.sh needs beyond Go. Idempotent: each part does
# nothing when its tool is already there.
#
#   promtool        Debian's prometheus package is downloaded (not installed)
#                   and only its promtool is unpacked, into .ci/tools/bin of
#                   this repository: no Prometheus server is installed,
#                   started or enabled.
#   podman, runc    Debian packages, for the compose test. Debian's podman
#                   package enables podman.socket and three podman units at
#                   boot; the ones this install enabled are disabled again
#                   (units enabled before are left as they were). Nothing is
#                   started or stopped.
#   podman-compose  from PyPI, into the project's venv .ci/tools/venv
#                   (.ci/python-venv), not the machine's Python.
#   Kubernetes' OpenAPI schemas: the k8s.io/kubernetes Go module of the
#                   release that matches k8s.io/api in deploy/go.mod, into
#                   the Go module cache (TestKubernetesSchemas reads it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.ci/tools/bin"

export DEBIAN_FRONTEND=noninteractive
apt_updated=
apt_update() {
	[ -n "$apt_updated" ] && return 0
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	apt_updated=1
}

# --- promtool
if command -v promtool >/dev/null 2>&1 || [ -x "$tools/promtool" ]; then
	echo "ci-setup: $(PATH="$tools:$PATH" promtool --version 2>&1 | head -n1)"
else
	apt_update
	dl=$(mktemp -d)
	trap 'rm -rf "$dl"' EXIT
	(cd "$dl" && apt-get -o APT::Sandbox::User=root download -qq prometheus)
	dpkg-deb -x "$dl"/prometheus_*.deb "$dl/x"
	mkdir -p "$tools"
	install -m 0755 "$dl/x/usr/bin/promtool" "$tools/promtool"
	echo "ci-setup: unpacked $("$tools/promtool" --version 2>&1 | head -n1) into $tools"
fi

# --- podman and runc
# The units Debian's podman package enables when it is installed.
podman_units=(podman.socket podman.service podman-restart.service podman-auto-update.service podman-auto-update.timer)
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
	was_enabled=()
	if command -v systemctl >/dev/null 2>&1; then
		for u in "${podman_units[@]}"; do
			if systemctl is-enabled --quiet "$u" 2>/dev/null; then was_enabled+=("$u"); fi
		done
	fi
	apt_update
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq podman runc >/dev/null
	if command -v systemctl >/dev/null 2>&1; then
		for u in "${podman_units[@]}"; do
			# shellcheck disable=SC2076 # literal match on purpose
			if [[ " ${was_enabled[*]} " =~ " $u " ]]; then continue; fi
			if systemctl is-enabled --quiet "$u" 2>/dev/null; then
				systemctl disable --quiet "$u" 2>/dev/null || echo "ci-setup: could not disable $u (enabled by the podman package)" >&2
			fi
		done
	fi
	echo "ci-setup: installed $(podman --version), $(runc --version | head -n1)"
else
	echo "ci-setup: $(podman --version), $(runc --version | head -n1)"
fi

# --- podman-compose
"$root/.ci/python-venv" podman-compose
echo "ci-setup: $("$root/.ci/tools/venv/bin/podman-compose" --version 2>/dev/null | head -n1)"

# --- Kubernetes' OpenAPI schemas
api=$(awk '$1 == "k8s.io/api" { print $2; exit }' "$root/deploy/go.mod")
(cd "$root/deploy" && go mod download "k8s.io/kubernetes@v1.${api#v0.}")
echo "ci-setup: Kubernetes v1.${api#v0.} OpenAPI schemas in the Go module cache"
