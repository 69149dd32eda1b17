// Locking-Center client for Node.js: FIFO-fair named locks over TCP.
//
// Wire protocol (one request per TCP connection):
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

import net from 'node:net';

export const DEFAULT_PORT = 22119;
export const MAX_FIELD_BYTES = 127;

// How long a request given up still reads after closing its write side (ms).
const HANG_UP_GRACE_MS = 2000;

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

/** Base class of every error this package throws. */
export class LockingCenterError extends Error {
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
function encodeField(value, what) {
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

function describe(key) {
  return typeof key === 'string' ? JSON.stringify(key) : `<${key.length} bytes>`;
}

function expect(answer, allowed) {
  if (!allowed.includes(answer)) {
    throw new ProtocolError(`unexpected answer byte 0x${answer.toString(16).padStart(2, '0')}`);
  }
  return answer;
}

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

// ---------------------------------------------------------------- client

/** A key this client was granted. `await using` it, or call unlock(). */
export class HeldLock {
  #client;
  #held = true;

  constructor(client, key) {
    this.#client = client;
    this.key = key;
  }

  /** True until unlock() has been called. */
  get held() {
    return this.#held;
  }

  /** Releases the key; a second call does nothing. */
  async unlock() {
    if (!this.#held) return;
    this.#held = false;
    await this.#client.unlock(this.key);
  }

  [asyncDispose]() {
    return this.unlock();
  }
}

/**
 * Locking-Center client. Holds no connection between calls: every request
 * opens its own TCP connection.
 */
export class Client {
  #host;
  #port;
  #source;

  /**
   * @param {string | {address?: string, source?: string | Uint8Array,
   *   connectTimeout?: number, ioTimeout?: number | null}} [options]
   */
  constructor(options = {}) {
    const opts = typeof options === 'string' ? { address: options } : options;
    const address = opts.address ?? process.env.LC_ADDRESS ?? `localhost:${DEFAULT_PORT}`;
    ({ host: this.#host, port: this.#port } = parseAddress(address));
    this.#source = opts.source ?? '';
    encodeField(this.#source, 'source'); // refuse a bad source now, not at first use
    /** Milliseconds allowed to open a connection. */
    this.connectTimeout = opts.connectTimeout ?? 5000;
    /** Milliseconds allowed for a non-waiting request's answer (null: forever). */
    this.ioTimeout = opts.ioTimeout === undefined ? 30000 : opts.ioTimeout;
  }

  get address() {
    const host = this.#host.includes(':') ? `[${this.#host}]` : this.#host;
    return `${host}:${this.#port}`;
  }

  get source() {
    return this.#source;
  }

  /**
   * Waits for the key in FIFO order and holds it.
   * Rejects with ResetWhileWaitingError, LockTimeoutError (options.timeout ms),
   * or options.signal's reason when aborted.
   */
  async lock(key, options = {}) {
    const frame = encodeFrame(Action.LOCK, key, this.#source);
    const answer = await this.#request(frame, { waiting: true, ...options });
    if (expect(answer, [Answer.OK, Answer.FAIL]) === Answer.FAIL) {
      throw new ResetWhileWaitingError(`lock ${describe(key)} was answered '-': reset while waiting`);
    }
    return new HeldLock(this, key);
  }

  /** Takes the key if it is free now: true; false if anyone holds it. */
  async tryLock(key) {
    const frame = encodeFrame(Action.TRY_LOCK, key, this.#source);
    const answer = expect(await this.#request(frame), [Answer.OK, Answer.FAIL, Answer.NOT_WON]);
    if (answer === Answer.FAIL) throw new RefusedError(`trylock ${describe(key)} was refused`);
    return answer === Answer.OK;
  }

  /** Scoped try-lock: a HeldLock, or NotWonError when someone holds the key. */
  async tryAcquire(key) {
    if (!(await this.tryLock(key))) {
      throw new NotWonError(`key ${describe(key)} is held by someone else`);
    }
    return new HeldLock(this, key);
  }

  /** Releases the key; RefusedError if it was not held. */
  async unlock(key) {
    await this.#expectOk(encodeFrame(Action.UNLOCK, key, this.#source), `unlock ${describe(key)}`);
  }

  /** Waits for one's turn on the key: lock, then unlock at once. */
  async wait(key, options = {}) {
    const held = await this.lock(key, options);
    await held.unlock();
  }

  /** Drops the key's holder; every waiter on it gets '-'. */
  async resetByKey(key) {
    await this.#expectOk(encodeFrame(Action.RESET_BY_KEY, key, this.#source), `reset of key ${describe(key)}`);
  }

  /** Fails every waiter of the source and releases its keys (default: this client's source). */
  async resetBySource(source = this.#source) {
    await this.#expectOk(encodeFrame(Action.RESET_BY_SOURCE, '', source), `reset of source ${describe(source)}`);
  }

  /**
   * Runs fn while holding the key, then unlocks, whatever fn does.
   * Resolves to fn's result. If fn throws, its error wins over an unlock error.
   */
  async withLock(key, fn, options = {}) {
    return runHeld(await this.lock(key, options), fn);
  }

  /** Like withLock, but never waits: NotWonError when the key is held. */
  async withTryLock(key, fn) {
    return runHeld(await this.tryAcquire(key), fn);
  }

  async #expectOk(frame, what) {
    if (expect(await this.#request(frame), [Answer.OK, Answer.FAIL]) === Answer.FAIL) {
      throw new RefusedError(`${what} was refused`);
    }
  }

  #request(frame, { waiting = false, timeout, signal } = {}) {
    const limit = waiting ? timeout : this.ioTimeout;
    const address = this.address;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      let settled = false;
      let connected = false;
      let givenUp = null; // { error, own } once the caller gave up after the frame went out
      let graceTimer;
      const socket = net.createConnection({ host: this.#host, port: this.#port, noDelay: true });

      const settle = () => {
        settled = true;
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
        clearTimeout(graceTimer);
        signal?.removeEventListener('abort', onAbort);
        socket.destroy();
      };
      const fail = (err) => {
        if (settled) return;
        settle();
        reject(givenUp ? givenUp.error : err);
      };
      // Giving up hangs up: the server reads EOF and withdraws the waiter. Once
      // a Lock or TryLock frame went out, only the write side is closed, so a
      // '+' sent just before the server noticed is still read (and given back
      // on 'data'), for at most HANG_UP_GRACE_MS.
      // own: err is this request's own error (a timeout), not the caller's
      // abort reason, so a failed give-back may be chained to it as its cause.
      const giveUp = (err, own) => {
        if (settled || givenUp) return;
        if (!connected || (frame[0] !== Action.LOCK && frame[0] !== Action.TRY_LOCK)) {
          fail(err);
          return;
        }
        givenUp = { error: err, own };
        socket.end();
        graceTimer = setTimeout(fail, HANG_UP_GRACE_MS);
      };
      const connectTimer = setTimeout(
        () => fail(new UnreachableError(`connecting to ${address} timed out after ${this.connectTimeout} ms`)),
        this.connectTimeout,
      );
      const answerTimer =
        limit == null
          ? undefined
          : setTimeout(
              () =>
                giveUp(
                  waiting
                    ? new LockTimeoutError(`not granted within ${limit} ms`)
                    : new UnreachableError(`no answer from ${address} within ${limit} ms`),
                  true,
                ),
              limit,
            );

      const onAbort = () => giveUp(signal.reason, false);
      signal?.addEventListener('abort', onAbort, { once: true });

      socket.once('connect', () => {
        connected = true;
        clearTimeout(connectTimer);
        socket.write(frame);
      });
      socket.on('data', (chunk) => {
        if (settled) return;
        settle();
        if (!givenUp) resolve(chunk[0]);
        else if (chunk[0] !== Answer.OK) reject(givenUp.error);
        else {
          // Granted as the caller gave up: nobody else would unlock the key.
          const unlock = Buffer.from(frame); // same key and source
          unlock[0] = Action.UNLOCK;
          this.#expectOk(unlock, 'unlock of a key granted as the request gave up').then(
            () => reject(givenUp.error),
            (err) => reject(gaveBackFailed(givenUp, err)),
          );
        }
      });
      socket.on('error', (err) => {
        fail(
          new UnreachableError(
            connected
              ? `connection to ${address} broke: ${err.message}`
              : `cannot connect to ${address}: ${err.message}`,
            { cause: err },
          ),
        );
      });
      // 'close' follows 'end' too (no half-open sockets): one handler covers both.
      socket.once('close', () => fail(new UnreachableError(`${address} closed the connection without an answer`)));
    });
  }
}

/**
 * The error of a give-up whose crossing grant could not be unlocked again: the
 * client's own timeout error gets the unlock's error as its `cause`; the
 * caller's abort reason is never modified (other requests may share the
 * signal), so the unlock's error is reported as a process warning instead.
 */
function gaveBackFailed(givenUp, cause) {
  if (givenUp.own) {
    Object.defineProperty(givenUp.error, 'cause', { value: cause, writable: true, configurable: true });
  } else {
    process.emitWarning(`a key granted as its request was aborted could not be unlocked again: ${cause.message}`, {
      type: 'LockingCenterWarning',
      detail: String(cause),
    });
  }
  return givenUp.error;
}

async function runHeld(held, fn) {
  let result;
  try {
    result = await fn(held);
  } catch (err) {
    await held.unlock().catch(() => {});
    throw err;
  }
  await held.unlock();
  return result;
}
