#!/usr/bin/env bash
# Checks the package the way a user gets it: `npm pack`, then a fresh project
# (`npm init -y`, then `npm pkg set type=module` as the README says;
# TypeScript 5.9, no @types) installs the tarball and
#
# - finds licence, repository, description and version in its package.json,
#   and only the files meant to ship in it;
# - type-checks the README's TypeScript example with `tsc --strict` under the
#   config `tsc --init` writes, under a minimal ES2022 config (default libs),
#   under lib ES2022 alone (no DOM), and again with @types/node added;
# - with LC_TEST_ADDRESS set, compiles that example to ES2022 and runs it, and
#   runs every JavaScript example of the README verbatim (LC_ADDRESS set to
#   the test server, LC_CLUSTER to $LC_TEST_CLUSTER, and LC_TLS_ADDRESS,
#   LC_CA, LC_CLIENT_CERT, LC_CLIENT_KEY to the fixture's mutual-TLS server
#   and certificates).
#
# Exit 0 when all of it passed. Called by test.sh.
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "package check failed: $*"; exit 1; }

tarball=$(npm pack --silent --pack-destination "$work") || fail "npm pack"
echo "packed $tarball: $(tar -tzf "$work/$tarball" | sed 's|^package/||' | sort | tr '\n' ' ')"
app="$work/app"
mkdir "$app" && cd "$app" || fail "mkdir"
npm init -y >/dev/null || fail "npm init"
npm pkg set type=module || fail "npm pkg set"
npm install --no-audit --no-fund --loglevel=error --prefer-offline "$work/$tarball" typescript@5.9.3 >/dev/null ||
  fail "npm install of the tarball and typescript@5.9.3"

node --input-type=module - <<'JS' || fail "package.json metadata"
import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync('node_modules/locking-center/package.json', 'utf8'));
const bad = [];
if (p.license !== 'MIT') bad.push(`license ${p.license}`);
if (p.repository?.url !== 'git+https://github.com/locking-center/locking-center.git') bad.push(`repository ${JSON.stringify(p.repository)}`);
if (!p.description) bad.push('no description');
if (p.version !== '0.2.0') bad.push(`version ${p.version}`);
for (const f of ['LICENSE', 'README.md', 'index.js', 'core.js', 'session.js', 'index.d.ts']) {
  try { readFileSync(`node_modules/locking-center/${f}`); } catch { bad.push(`${f} not shipped`); }
}
if (bad.length) { console.error(bad.join('; ')); process.exit(1); }
console.log('package.json: license, repository, description, version; LICENSE shipped');
JS

# The README's examples, as they are written.
node - "$here/README.md" <<'JS' || fail "extracting the README examples"
const fs = require('node:fs');
const text = fs.readFileSync(process.argv[2], 'utf8');
const blocks = [...text.matchAll(/^```(ts|js)\n([\s\S]*?)^```/gm)];
let ts = 0, js = 0;
for (const [, lang, code] of blocks) {
  if (lang === 'ts') fs.writeFileSync(`example${++ts}.ts`, code);
  // As the README says: ES modules as .js in a "type": "module" project,
  // the CommonJS form as a .cjs file.
  else fs.writeFileSync(`example${++js}.${code.startsWith('// CommonJS') ? 'cjs' : 'js'}`, code);
}
if (ts === 0 || js === 0) { console.error('no ts or js example in README.md'); process.exit(1); }
console.log(`README: ${ts} TypeScript and ${js} JavaScript examples`);
JS

tsc=node_modules/.bin/tsc
echo "$($tsc --version), no @types installed: $(ls node_modules/@types 2>/dev/null | wc -l) packages"
$tsc --init >/dev/null || fail "tsc --init"
sed -i 's|^{|{ "include": ["example*.ts"],|' tsconfig.json
$tsc --noEmit -p . || fail "tsc --strict under the tsc --init config"
echo '{ "compilerOptions": { "strict": true, "module": "nodenext", "target": "es2022", "types": [], "outDir": "out" }, "include": ["example*.ts"] }' >min.json
$tsc -p min.json || fail "tsc --strict under a minimal ES2022 config"
# lib ES2022 alone has no console: check the declarations with a file that needs none.
cat >nolib.ts <<'TS'
import { openSession, LockingCenterError, type ErrorCode } from 'locking-center';
await using session = await openSession({ ttl: 10_000 });
await using grant = await session.lock('k', { timeout: 1000 });
export const token: bigint = grant.token;
export const code = (e: unknown): ErrorCode | null => (e instanceof LockingCenterError ? e.code : null);
TS
echo '{ "compilerOptions": { "strict": true, "module": "nodenext", "target": "es2022", "lib": ["es2022"], "types": [], "noEmit": true }, "files": ["nolib.ts"] }' >nolib.json
$tsc -p nolib.json || fail "tsc --strict under lib ES2022 alone"
echo "tsc --strict passed: tsc --init config, minimal ES2022 config, lib ES2022 alone"

if [ -n "${LC_TEST_ADDRESS:-}" ]; then
  export LC_ADDRESS=$LC_TEST_ADDRESS
  # The cluster example against the cluster (one server will do without it),
  # the TLS one against the mutual-TLS server with the fixture's certificates.
  export LC_CLUSTER=${LC_TEST_CLUSTER:-$LC_TEST_ADDRESS}
  tls_dir=${LC_TEST_TLS_DIR:-}
  export LC_TLS_ADDRESS=${LC_TEST_MTLS_ADDRESS:-} LC_CA=${tls_dir:+$tls_dir/ca.pem}
  export LC_CLIENT_CERT=${tls_dir:+$tls_dir/client.pem} LC_CLIENT_KEY=${tls_dir:+$tls_dir/client-key.pem}
  for f in out/example*.js example*.js example*.cjs; do
    if grep -q LC_TLS_ADDRESS "$f" && { [ -z "$LC_TLS_ADDRESS" ] || [ -z "$LC_CA" ]; }; then
      [ "${CI:-}" = true ] && fail "README example $f needs LC_TEST_MTLS_ADDRESS and LC_TEST_TLS_DIR (CI=true)"
      echo "README example $f NOT RUN: LC_TEST_MTLS_ADDRESS / LC_TEST_TLS_DIR not set"
      continue
    fi
    msg=$(timeout 60 node "$f" 2>&1) || fail "README example $f: $msg"
    echo "README example $f ran: $(tail -n 1 <<<"$msg")"
  done
fi

# A project that does have @types/node: the declarations must merge with it.
npm install --no-audit --no-fund --loglevel=error --prefer-offline @types/node@20 >/dev/null || fail "npm install @types/node"
echo '{ "compilerOptions": { "strict": true, "module": "nodenext", "target": "es2022", "types": ["node"], "noEmit": true }, "include": ["example*.ts", "nolib.ts"] }' >node.json
$tsc -p node.json || fail "tsc --strict with @types/node"
echo "tsc --strict passed with @types/node too"
