#!/bin/sh
# install.sh installs, with Debian's apt-get, the systems bench-compare runs
# beside Locking-Center: redis-server, etcd-server and postgresql. It is
# idempotent: a system whose binary is already found is left alone, and
# apt-get is not run at all when every binary is there. It needs root.
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
# Debian puts the server binaries of PostgreSQL outside PATH.
found_pg=""
for d in /usr/lib/postgresql/*/bin; do
	if [ -x "$d/postgres" ] && [ -x "$d/initdb" ]; then found_pg="$d"; fi
done
[ -n "$found_pg" ] || missing="$missing postgresql"

if [ -z "$missing" ]; then
	echo "install.sh: redis-server, etcd and postgres found; nothing to install"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "install.sh: need root to install:$missing" >&2
	exit 1
fi
echo "install.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086 # one word per package
apt-get install -y --no-install-recommends $missing
