// What the one-request client (index.js) and sessions (session.js) share:
// constants, errors, field encoding, addresses.
//
// v1 wire protocol (one request per TCP connection):
//
//   +--------+---------+---------------+------------+------------------+
//   | action | keySize | key           | sourceSize | source           |
//   | 1 byte | 1 byte  | keySize bytes | 1 byte     | sourceSize bytes |
//   +--------+---------+---------------+------------+------------------+
//
// Sizes are signed bytes (0..127). The answer is one byte: '+' success,
// '-' failure, '#' try-lock not won. The client connects, writes the frame
// in one write, reads one byte and closes; it half-closes only to give up,
// because the server takes EOF as a hang-up.

import dns from 'node:dns/promises';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';

export const DEFAULT_PORT = 22119;
export const MAX_FIELD_BYTES = 127;

// How long a request given up still reads after closing its write side (ms).
export const HANG_UP_GRACE_MS = 2000;

/** Action numbers of the wire protocol. */
export const Action = Object.freeze({
  LOCK: 1,
  UNLOCK: 2,
  RESET_BY_KEY: 3,
  RESET_BY_SOURCE: 4,
  TRY_LOCK: 5,
});

/** Answer bytes. */
export const Answer = Object.freeze({
  OK: 0x2b, // '+'
  FAIL: 0x2d, // '-'
  NOT_WON: 0x23, // '#'
});

// ---------------------------------------------------------------- errors

/** Base class of every error this package throws; `code` names the subclass ('LC_...'). */
export class LockingCenterError extends Error {
  code = 'LC_ERROR';

  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A scoped try-lock (withTryLock, tryAcquire) found the key held ('#'). */
export class NotWonError extends LockingCenterError {
  code = 'LC_NOT_WON';
}

/** A lock was answered '-': its key or source was reset while it waited. */
export class ResetWhileWaitingError extends LockingCenterError {
  code = 'LC_RESET';
}

/** Unlock, a reset or TryLock was answered '-' (unlock: the key was not held). */
export class RefusedError extends LockingCenterError {
  code = 'LC_REFUSED';
}

/** The key, source or address was refused before any connection was opened. */
export class InvalidRequestError extends RefusedError {
  code = 'LC_INVALID';
}

/** Connecting failed or timed out, or the connection ended without an answer. */
export class UnreachableError extends LockingCenterError {
  code = 'LC_UNREACHABLE';
}

/** The `timeout` option passed before the lock was granted; the waiter was withdrawn. */
export class LockTimeoutError extends LockingCenterError {
  code = 'LC_TIMEOUT';
}

/** The server answered a byte that the protocol does not allow here. */
export class ProtocolError extends LockingCenterError {
  code = 'LC_PROTOCOL';
}

// -------------------------------------------------------------- encoding

const utf8 = new TextEncoder();

function toBytes(value, what) {
  if (typeof value === 'string') return utf8.encode(value);
  if (value instanceof Uint8Array) return value;
  throw new TypeError(`${what} must be a string or a Uint8Array`);
}

/** The bytes of a key or source, refusing more than MAX_FIELD_BYTES. */
export function encodeField(value, what) {
  const bytes = toBytes(value, what);
  if (bytes.length > MAX_FIELD_BYTES) {
    throw new InvalidRequestError(
      `${what} is ${bytes.length} bytes long; at most ${MAX_FIELD_BYTES} are allowed`,
    );
  }
  return bytes;
}

/**
 * Encodes one request frame, refusing an invalid one with InvalidRequestError.
 * ResetBySource takes no key (send ''); every other action needs 1..127 bytes.
 */
export function encodeFrame(action, key, source) {
  if (!Object.values(Action).includes(action)) {
    throw new InvalidRequestError(`unknown action ${String(action)}`);
  }
  const k = encodeField(key, 'key');
  if (k.length === 0 && action !== Action.RESET_BY_SOURCE) {
    throw new InvalidRequestError('key is empty');
  }
  const s = encodeField(source, 'source');
  const frame = Buffer.allocUnsafe(3 + k.length + s.length);
  frame[0] = action;
  frame[1] = k.length;
  frame.set(k, 2);
  frame[2 + k.length] = s.length;
  frame.set(s, 3 + k.length);
  return frame;
}

/** Splits 'host:port', '[v6]:port' or 'host' (port 22119). */
export function parseAddress(address) {
  if (typeof address !== 'string' || address === '') {
    throw new InvalidRequestError("address must be a non-empty 'host:port' string");
  }
  let host = address;
  let portText = '';
  if (address.startsWith('[')) {
    const end = address.indexOf(']');
    if (end < 0) throw new InvalidRequestError(`address ${address}: missing ']'`);
    host = address.slice(1, end);
    const rest = address.slice(end + 1);
    if (rest !== '' && !rest.startsWith(':')) {
      throw new InvalidRequestError(`address ${address}: expected ':' after ']'`);
    }
    portText = rest.slice(1);
  } else {
    const parts = address.split(':');
    if (parts.length === 2) [host, portText] = parts;
  }
  host ||= 'localhost';
  if (portText === '') return { host, port: DEFAULT_PORT };
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port < 1 || port > 65535) {
    throw new InvalidRequestError(`address ${address}: bad port`);
  }
  return { host, port };
}

export function describe(key) {
  return typeof key === 'string' ? JSON.stringify(key) : `<${key.length} bytes>`;
}

export function expect(answer, allowed) {
  if (!allowed.includes(answer)) {
    throw new ProtocolError(`unexpected answer byte 0x${answer.toString(16).padStart(2, '0')}`);
  }
  return answer;
}

export const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');


// ------------------------------------------------------------ connecting
//
// A client is given one address or several (a cluster's nodes, or a DNS name
// with a record per node). Each connection attempt resolves every name, puts
// the endpoints in a random order (clients spread over the nodes, and none
// waits on a dead one first every time) and tries them one after another,
// each within its own timeout, until one connects (and completes the TLS
// handshake). Any node of a cluster will do: a follower forwards to the
// leader.

/**
 * Splits one address, a comma-separated list ('a:22119,b:22119'), or an
 * array of addresses ('host:port' strings or { host, port } objects).
 */
export function parseAddresses(address) {
  let parts;
  if (typeof address === 'string') parts = address.split(',').map((p) => p.trim()).filter((p) => p !== '');
  else if (Array.isArray(address)) parts = address;
  else if (address && typeof address === 'object' && 'host' in address) parts = [address];
  else throw new InvalidRequestError("address must be a 'host:port' string, a comma-separated list or an array of them");
  if (parts.length === 0) throw new InvalidRequestError('no address given');
  return parts.map((p) => {
    if (typeof p === 'string') return parseAddress(p);
    if (p && typeof p === 'object' && typeof p.host === 'string') {
      const port = Number(p.port ?? DEFAULT_PORT);
      if (!Number.isInteger(port) || port < 1 || port > 65535) throw new InvalidRequestError(`address ${p.host}: bad port`);
      return { host: p.host || 'localhost', port };
    }
    throw new InvalidRequestError(`bad address ${String(p)}`);
  });
}

function hostPort(host, port) {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** The addresses as 'host:port[,host:port…]', for messages. */
export function describeAddresses(targets) {
  return targets.map((t) => hostPort(t.host, t.port)).join(',');
}

/**
 * Every endpoint of every address, in a random order: { ip, family, port,
 * name (the host as given: the TLS server name), where (for messages) }. A
 * name that does not resolve adds its error to `errors`.
 */
export async function resolveEndpoints(targets, errors) {
  const out = [];
  for (const { host, port } of targets) {
    let records;
    if (net.isIP(host)) records = [{ address: host, family: net.isIP(host) }];
    else {
      try {
        records = await dns.lookup(host, { all: true });
      } catch (err) {
        errors.push(`${hostPort(host, port)}: ${err.message}`);
        continue;
      }
    }
    const seen = new Set();
    for (const r of records) {
      if (seen.has(r.address)) continue;
      seen.add(r.address);
      const where = hostPort(host, port) + (r.address === host ? '' : ` (${r.address})`);
      out.push({ ip: r.address, family: r.family, port, name: host, where });
    }
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/**
 * Connects to one endpoint within `timeout` ms: a TCP socket, or a TLS one
 * when `tlsOptions` (tls.connect options: ca, cert, key, servername, …) is
 * given, resolved once the handshake has verified the server. Rejects with
 * the socket's error (a certificate refused included), or a timeout.
 */
export function connectEndpoint(ep, timeout, tlsOptions, signal) {
  return new Promise((resolve, reject) => {
    let socket;
    if (tlsOptions) {
      const servername = tlsOptions.servername ?? (net.isIP(ep.name) ? undefined : ep.name);
      // host is what the certificate is checked against when no servername is given.
      // Without a servername (an IP address), the certificate is checked
      // against host, the IP address.
      socket = tls.connect({ ...tlsOptions, host: ep.ip, port: ep.port, servername });
    } else {
      socket = net.createConnection({ host: ep.ip, port: ep.port, family: ep.family });
    }
    socket.setNoDelay(true);
    const done = (err) => {
      clearTimeout(timer);
      socket.off('error', done);
      socket.off(tlsOptions ? 'secureConnect' : 'connect', ok);
      signal?.removeEventListener('abort', onAbort);
      if (err) {
        socket.destroy();
        reject(err);
      }
    };
    const ok = () => {
      done(null);
      resolve(socket);
    };
    const onAbort = () => done(signal.reason);
    const timer = setTimeout(() => done(new ConnectTimeout(`${ep.where}: timed out after ${timeout} ms`)), Math.max(timeout, 0));
    socket.once('error', done);
    socket.once(tlsOptions ? 'secureConnect' : 'connect', ok);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A connection attempt that ran out of time. */
export class ConnectTimeout extends Error {}

/** A deadline passed while connecting (the caller's timeout, not one attempt's). */
export class DeadlineError extends Error {}

/**
 * Connects to the first endpoint that answers, each attempt within `timeout`
 * ms and all before `deadline` (a performance.now() time, or null); resolves
 * to { socket, where }. Rejects with DeadlineError when the deadline passed,
 * signal's reason when aborted, and UnreachableError when no endpoint
 * answered (its cause: the last attempt's error, e.g. a refused certificate).
 */
export async function connectAny(targets, { timeout, tlsOptions, deadline = null, signal } = {}) {
  const errors = [];
  let last;
  for (const ep of await resolveEndpoints(targets, errors)) {
    let t = timeout;
    if (deadline !== null) {
      t = Math.min(t, deadline - performance.now());
      if (t <= 0) throw new DeadlineError('deadline passed while connecting');
    }
    try {
      return { socket: await connectEndpoint(ep, t, tlsOptions, signal), where: ep.where };
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      last = err;
      errors.push(err instanceof ConnectTimeout ? err.message : `${ep.where}: ${err.message}`);
    }
  }
  if (deadline !== null && performance.now() >= deadline) throw new DeadlineError('deadline passed while connecting');
  throw unreachableError(targets, errors, last);
}

/** The error of a round in which no endpoint answered. */
export function unreachableError(targets, errors, last) {
  return new UnreachableError(`cannot connect to ${describeAddresses(targets)}: ${errors.join('; ') || 'no address'}`, {
    cause: last,
  });
}

/** The tls.connect options of a `tls` option: an object, true (the system's roots), or none. */
export function tlsOptionsOf(value) {
  if (value == null || value === false) return null;
  if (value === true) return {};
  if (typeof value !== 'object') throw new TypeError('tls must be tls.connect options (an object), true, or omitted');
  return value;
}
