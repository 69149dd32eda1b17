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

/** A free loopback port. */
export async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A server of the test's own, from $LC_SERVER_BIN, on free loopback ports.
 * start() waits for GET /readyz 200; stop() sends SIGTERM to its PID and
 * waits for the exit; start() again is a restart on the same ports.
 */
export class OwnServer {
  constructor(env = {}) {
    this.bin = process.env.LC_SERVER_BIN;
    this.env = env;
    this.proc = null;
    this.log = '';
  }

  async start(deadlineMs = 10000) {
    const { spawn } = await import('node:child_process');
    if (!this.tcpPort) {
      this.tcpPort = await freePort();
      this.webPort = await freePort();
      this.address = `127.0.0.1:${this.tcpPort}`;
      this.webAddress = `127.0.0.1:${this.webPort}`;
    }
    const env = { ...process.env, BIND_ADDRESS: this.address, WEB_ADDRESS: this.webAddress, ...this.env };
    const proc = spawn(this.bin, [], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    proc.stdout.on('data', (d) => (this.log += d));
    proc.stderr.on('data', (d) => (this.log += d));
    this.exited = new Promise((resolve) => proc.once('exit', resolve));
    const end = Date.now() + deadlineMs;
    while (Date.now() < end) {
      if (proc.exitCode !== null) throw new Error(`server exited ${proc.exitCode}: ${this.log}`);
      try {
        const res = await fetch(`http://${this.webAddress}/readyz`, { signal: AbortSignal.timeout(1000) });
        if (res.status === 200) return this;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    await this.stop();
    throw new Error(`server not ready in ${deadlineMs} ms: ${this.log}`);
  }

  async stop() {
    const proc = this.proc;
    this.proc = null;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await this.exited;
    }
  }
}

/**
 * A TCP proxy on loopback to `target` (host:port); cut() drops every
 * connection through it, as a network failure would. close() stops it.
 */
export async function startProxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.createConnection({ host, port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    cut() {
      for (const s of sockets) s.destroy();
    },
    async close() {
      this.cut();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The JSON API's view of one session (GET /api/v1/sessions), or undefined. */
export async function sessionInfo(webAddress, id) {
  const res = await fetch(`http://${webAddress}/api/v1/sessions`, { signal: AbortSignal.timeout(2000) });
  const hex = id.toString(16).padStart(16, '0');
  return (await res.json()).find((s) => s.session === hex);
}

/** Awaits a condition (checked every 10 ms) that has no event to wait on. */
export async function until(predicate, what = 'condition', deadlineMs = 5000) {
  const end = Date.now() + deadlineMs;
  while (!(await predicate())) {
    if (Date.now() > end) throw new Error(`${what} not met within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The values of the fixture's variables, and `skip`: false when all are set;
 * else the reason to skip, said loudly. Under CI=true a missing variable is
 * not a skip: it throws, failing the run (clients/run-tests provides them).
 */
export function fixtureEnv(...names) {
  const missing = names.filter((n) => !process.env[n]);
  const values = names.map((n) => process.env[n]);
  if (missing.length === 0) return { skip: false, values };
  const why = `${missing.join(', ')} not set (clients/run-tests starts the cluster and TLS fixture and sets them)`;
  if (process.env.CI === 'true') throw new Error(`${why}; CI=true: not skipped`);
  console.log(`NOT RUN: ${why}`);
  return { skip: `NOT RUN: ${why}`, values };
}
