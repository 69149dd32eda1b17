// Locking-Center client for Node.js: FIFO-fair named locks over TCP.
//
// Sessions (session.js) are the recommended way: holds that end with their
// holder, fencing tokens, one connection for the whole program. The Client
// below speaks v1: one request per TCP connection; it connects, writes the
// frame in one write, reads one byte and closes; it half-closes only to give
// up, because the server takes EOF as a hang-up.

import { performance } from 'node:perf_hooks';

import {
  Action,
  Answer,
  DEFAULT_PORT,
  DeadlineError,
  HANG_UP_GRACE_MS,
  LockTimeoutError,
  NotWonError,
  RefusedError,
  ResetWhileWaitingError,
  UnreachableError,
  asyncDispose,
  connectAny,
  describe,
  describeAddresses,
  encodeField,
  encodeFrame,
  expect,
  parseAddresses,
  tlsOptionsOf,
} from './core.js';

export {
  Action,
  Answer,
  DEFAULT_PORT,
  MAX_FIELD_BYTES,
  LockingCenterError,
  NotWonError,
  ResetWhileWaitingError,
  RefusedError,
  InvalidRequestError,
  UnreachableError,
  LockTimeoutError,
  ProtocolError,
  encodeFrame,
  parseAddress,
  parseAddresses,
} from './core.js';
export {
  DEFAULT_ANSWER_TIMEOUT,
  DisconnectedError,
  Grant,
  NotHeldError,
  OutcomeUnknownError,
  Session,
  SessionAction,
  SessionClosedError,
  SessionLostError,
  decodeAnswer,
  decodeOpenAnswer,
  encodeOpen,
  encodeRequest,
  openSession,
} from './session.js';

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
 * opens its own TCP (or TLS) connection, to the first of its addresses that
 * answers, tried in a random order. A request is never sent twice.
 */
export class Client {
  #targets;
  #tls;
  #source;

  /**
   * @param {string | {address?: string | Array<string | {host: string, port?: number}>,
   *   source?: string | Uint8Array, connectTimeout?: number, ioTimeout?: number | null,
   *   tls?: import('node:tls').ConnectionOptions | boolean}} [options]
   */
  constructor(options = {}) {
    const opts = typeof options === 'string' || Array.isArray(options) ? { address: options } : options;
    const address = opts.address ?? process.env.LC_ADDRESS ?? `localhost:${DEFAULT_PORT}`;
    this.#targets = parseAddresses(address);
    this.#tls = tlsOptionsOf(opts.tls);
    this.#source = opts.source ?? '';
    encodeField(this.#source, 'source'); // refuse a bad source now, not at first use
    /** Milliseconds allowed for each connection attempt. */
    this.connectTimeout = opts.connectTimeout ?? 5000;
    /** Milliseconds allowed for a non-waiting request's answer (null: forever). */
    this.ioTimeout = opts.ioTimeout === undefined ? 30000 : opts.ioTimeout;
  }

  /** The addresses, comma-separated. */
  get address() {
    return describeAddresses(this.#targets);
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

  async #request(frame, { waiting = false, timeout, signal } = {}) {
    const limit = waiting ? timeout : this.ioTimeout;
    if (signal?.aborted) throw signal.reason;
    const deadline = limit == null ? null : performance.now() + limit;
    const expired = () =>
      waiting
        ? new LockTimeoutError(`not granted within ${limit} ms`)
        : new UnreachableError(`no answer from ${this.address} within ${limit} ms`);
    let socket, address;
    try {
      ({ socket, where: address } = await connectAny(this.#targets, {
        timeout: this.connectTimeout,
        tlsOptions: this.#tls,
        deadline,
        signal,
      }));
    } catch (err) {
      if (err instanceof DeadlineError) throw expired();
      throw err;
    }
    return this.#exchange(socket, address, frame, {
      waiting,
      limit: deadline === null ? null : Math.max(deadline - performance.now(), 0),
      signal,
      expired,
    });
  }

  // Writes the frame on a connected socket and reads its one-byte answer.
  #exchange(socket, address, frame, { waiting, limit, signal, expired }) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        socket.destroy();
        reject(signal.reason);
        return;
      }
      let settled = false;
      let givenUp = null; // { error, own } once the caller gave up after the frame went out
      let graceTimer;

      const settle = () => {
        settled = true;
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
      // a Lock or TryLock frame went out, only the write side is closed (over
      // TLS: close_notify), so a '+' sent just before the server noticed is
      // still read (and given back on 'data'), for at most HANG_UP_GRACE_MS.
      // own: err is this request's own error (a timeout), not the caller's
      // abort reason, so a failed give-back may be chained to it as its cause.
      const giveUp = (err, own) => {
        if (settled || givenUp) return;
        if (frame[0] !== Action.LOCK && frame[0] !== Action.TRY_LOCK) {
          fail(err);
          return;
        }
        givenUp = { error: err, own };
        socket.end();
        graceTimer = setTimeout(fail, HANG_UP_GRACE_MS);
      };
      const answerTimer = limit == null ? undefined : setTimeout(() => giveUp(expired(), true), limit);

      const onAbort = () => giveUp(signal.reason, false);
      signal?.addEventListener('abort', onAbort, { once: true });

      socket.write(frame);
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
        fail(new UnreachableError(`connection to ${address} broke: ${err.message}`, { cause: err }));
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
