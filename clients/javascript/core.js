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

