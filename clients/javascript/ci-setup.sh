#!/usr/bin/env bash
# Installs what the JavaScript client's checks need: Node.js >= 20 with npm,
# and the dev dependency pinned in package-lock.json (typescript 5.9; no
# @types: the package's types stand alone). Idempotent; fast when everything
# is already there. package-check.sh installs typescript@5.9.3 (and
# @types/node, for one check) into a fresh project, from the npm cache when
# it can.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

# Reinstall only when the lock file changed since the last install.
stamp=node_modules/.lc-installed
if [ ! -x node_modules/.bin/tsc ] || [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi
echo "javascript client: node $(node --version), $(node_modules/.bin/tsc --version)"
