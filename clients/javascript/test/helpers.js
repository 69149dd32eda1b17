import { readFileSync } from 'node:fs';
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

export function loadVectors() {
  const path =
    process.env.LC_VECTORS || fileURLToPath(new URL('../../../wire/testdata/vectors.json', import.meta.url));
  return JSON.parse(readFileSync(path, 'utf8'));
}

const runId = randomBytes(5).toString('hex');

/** A key no other run or client suite uses. */
export function uniqueKey(name) {
  return `js-${name}-${runId}-${randomBytes(3).toString('hex')}`;
}

/** host:port on loopback where nothing listens. */
export async function unusedAddress() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `127.0.0.1:${port}`;
}

/** GET /api/v1/keys/{key}: the JSON, or null when the key is not held. */
export async function keyInfo(webAddress, key) {
  const res = await fetch(`http://${webAddress}/api/v1/keys/${encodeURIComponent(key)}`, {
    signal: AbortSignal.timeout(2000),
  });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`GET key ${key}: HTTP ${res.status}`);
  return res.json();
}

/** Polls the JSON API until the key's wait queue has `length` entries. */
export async function waitForQueue(webAddress, key, length, deadlineMs = 5000) {
  const end = Date.now() + deadlineMs;
  let info = null;
  while (Date.now() < end) {
    try {
      info = await keyInfo(webAddress, key);
    } catch {
      info = null;
    }
    if (info !== null && (info.queue ?? []).length === length) return info;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`queue of ${key} did not reach ${length} entries in ${deadlineMs} ms; last: ${JSON.stringify(info)}`);
}
