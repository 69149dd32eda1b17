// Sessions (docs/protocol.md, "Sessions"): one TCP connection carrying the
// requests of the whole program, answered out of order by id, owning the keys
// it takes. A session's holds end with it — at close(), when the server ends
// it, or one TTL after the server last heard from it — so a crashed program's
// keys free themselves. Every grant carries a fencing token (a BigInt).
//
// Open, 16 + s + a bytes, and its 13-byte answer:
//
//   +----+---------+--------+--------+------------+--------+----------+------+
//   | 16 | version | ttl_ms | resume | sourceSize | source | authSize | auth |
//   | 1B | 1B = 1  | 4B     | 8B     | 1B = s     | s B    | 1B = a   | a B  |
//   +----+---------+--------+--------+------------+--------+----------+------+
//   answer: [status:1][ttl_ms:4][session:8]
//
// Request, 14 + k bytes, and its 13-byte answer:
//
//   +--------+-----+-------+---------+-----+
//   | action | id  | token | keySize | key |
//   | 1B     | 4B  | 8B    | 1B = k  | k B |
//   +--------+-----+-------+---------+-----+
//   answer: [id:4][status:1][token:8]
//
// Integers are big-endian and unsigned.
//
// How the protocol's promises are kept: everything runs on the event loop, so
// no state needs a lock. One pump writes every queued request in one write
// and sends Ping when nothing was sent for a third of the TTL; the socket's
// 'data' handler matches each answer to its call by id. A call given up (an
// AbortSignal, a timeout) after its Lock was sent sends Cancel and keeps the
// id pending; a grant that crossed the Cancel is unlocked again by its token,
// so a rejected lock() always means nothing is held.
//
// A session is given one address or several (a cluster's nodes, a DNS name
// with a record per node) and connects to any that answers, tried in a
// random order: every node of a cluster forwards to the leader. When the
// connection drops (the node died, or stopped leading and closed its
// clients' connections), the session resumes on any node, in rounds with a
// growing, jittered back-off, while its TTL allows. Every Lock and TryLock
// that was pending on the lost connection is sent again after the resume
// with its old id, before anything else, in the order they were first sent:
// the server answers a grant it made for that request at once with its token
// (Reissue, docs/protocol.md), so a grant whose answer was lost is returned,
// not waited for; otherwise the request is carried out anew and its caller
// goes on waiting. The id of a grant the program holds is never given to
// another request. An unlock or reset whose answer was lost rejects with
// OutcomeUnknownError and is never sent again (a lost unlock is settled after
// the resume by an Unlock naming its token); a Ping or Close with
// DisconnectedError. A Lock or TryLock whose caller gave up may have been
// granted: after the resume it is unlocked again, so no key is left held by
// nobody. The holds are certain until the send time of the last answered
// request plus the TTL: when that passes without a resume, or the server
// refuses the resume, the session is lost: `signal` aborts and `done`
// resolves with a SessionLostError, and every pending and later call rejects
// with it.

import { performance } from 'node:perf_hooks';

import {
  Answer,
  DEFAULT_PORT,
  LockingCenterError,
  LockTimeoutError,
  NotWonError,
  ProtocolError,
  RefusedError,
  ResetWhileWaitingError,
  UnreachableError,
  InvalidRequestError,
  ConnectTimeout,
  connectEndpoint,
  describeAddresses,
  encodeField,
  parseAddresses,
  resolveEndpoints,
  tlsOptionsOf,
  unreachableError,
  describe,
  asyncDispose,
} from './core.js';

/** Action numbers inside a session; 16 opens one. */
export const SessionAction = Object.freeze({
  OPEN: 16,
  LOCK: 1,
  UNLOCK: 2,
  RESET_BY_KEY: 3,
  RESET_BY_SOURCE: 4,
  TRY_LOCK: 5,
  CANCEL: 6,
  PING: 7,
  CLOSE: 8,
});
const A = SessionAction;

/** Milliseconds a request other than Lock waits for its answer by default (every client's default). */
export const DEFAULT_ANSWER_TIMEOUT = 30000;

const SESSION_VERSION = 1;
const ANSWER_SIZE = 13;
const MAX_ID = 0xffffffff;
const MAX_U64 = (1n << 64n) - 1n;
// The server's bound on requests awaiting an answer on one connection.
const MAX_PENDING = 1024;
// Back-off between resume attempts: the first is immediate, then this,
// doubling to the maximum, each scaled by a random factor in [0.5, 1].
const MIN_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 1000;
const NEEDS_KEY = new Set([A.LOCK, A.UNLOCK, A.RESET_BY_KEY, A.TRY_LOCK]);

// ---------------------------------------------------------------- errors

/** A session's unlock was answered '-': it does not hold that grant. Nothing was released. */
export class NotHeldError extends RefusedError {
  code = 'LC_NOT_HELD';
}

/**
 * An unlock or reset was sent, but its answer was lost (or a tryLock got no
 * answer within answerTimeout): it may or may not have taken effect. It is
 * never sent again blindly.
 */
export class OutcomeUnknownError extends LockingCenterError {
  code = 'LC_OUTCOME_UNKNOWN';
}

/**
 * The session's connection broke before the answer to a Ping or a Close (a
 * Lock or TryLock is reissued instead); the session resumes.
 */
export class DisconnectedError extends LockingCenterError {
  code = 'LC_DISCONNECTED';
}

/** The session was lost (refused on resume, or its TTL passed): every hold it had is gone. */
export class SessionLostError extends LockingCenterError {
  code = 'LC_SESSION_LOST';
}

/** The session was closed by close(). */
export class SessionClosedError extends LockingCenterError {
  code = 'LC_SESSION_CLOSED';
}

// -------------------------------------------------------------- encoding

function uint(value, bits, what) {
  const max = bits === 64 ? MAX_U64 : (1n << BigInt(bits)) - 1n;
  let v;
  try {
    v = BigInt(value);
  } catch {
    throw new InvalidRequestError(`${what} must be an integer, not ${String(value)}`);
  }
  if ((typeof value === 'number' && !Number.isInteger(value)) || v < 0n || v > max) {
    throw new InvalidRequestError(`${what} must be an integer in 0..${max}, not ${String(value)}`);
  }
  return v;
}

/** Encodes a session open (`resume` 0n: a new session), refusing invalid input. */
export function encodeOpen({ version = SESSION_VERSION, ttlMs = 0, resume = 0n, source = '', auth = '' } = {}) {
  const s = encodeField(source, 'source');
  const a = encodeField(auth, 'auth');
  const frame = Buffer.alloc(16 + s.length + a.length);
  frame[0] = A.OPEN;
  frame[1] = Number(uint(version, 8, 'version'));
  frame.writeUInt32BE(Number(uint(ttlMs, 32, 'ttlMs')), 2);
  frame.writeBigUInt64BE(uint(resume, 64, 'resume'), 6);
  frame[14] = s.length;
  frame.set(s, 15);
  frame[15 + s.length] = a.length;
  frame.set(a, 16 + s.length);
  return frame;
}

/** Decodes the 13-byte answer to an open: `{ status, ttlMs, session }`. */
export function decodeOpenAnswer(bytes) {
  if (bytes.length !== ANSWER_SIZE) throw new ProtocolError(`an open answer is 13 bytes, not ${bytes.length}`);
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  return { status: b[0], ttlMs: b.readUInt32BE(1), session: b.readBigUInt64BE(5) };
}

/**
 * Encodes one session request, refusing invalid input: Lock, TryLock, Unlock
 * and ResetByKey need a key of 1..127 bytes; ResetBySource carries the source
 * to reset (empty: the peer's IP) in the key field; Cancel, Ping and Close ''.
 */
export function encodeRequest(action, id, token, key) {
  if (!Object.values(A).includes(action) || action === A.OPEN) {
    throw new InvalidRequestError(`unknown session action ${String(action)}`);
  }
  const k = encodeField(key, 'key');
  if (k.length === 0 && NEEDS_KEY.has(action)) throw new InvalidRequestError('key is empty');
  const frame = Buffer.alloc(14 + k.length);
  frame[0] = action;
  frame.writeUInt32BE(Number(uint(id, 32, 'id')), 1);
  frame.writeBigUInt64BE(uint(token, 64, 'token'), 5);
  frame[13] = k.length;
  frame.set(k, 14);
  return frame;
}

/** Decodes one 13-byte session answer: `{ id, status, token }`. */
export function decodeAnswer(bytes) {
  if (bytes.length !== ANSWER_SIZE) throw new ProtocolError(`a session answer is 13 bytes, not ${bytes.length}`);
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  return { id: b.readUInt32BE(0), status: b[4], token: b.readBigUInt64BE(5) };
}

// Encodes a request whose key was validated already (the session's hot path).
function frameOf(action, id, token, key) {
  const frame = Buffer.allocUnsafe(14 + key.length);
  frame[0] = action;
  frame.writeUInt32BE(id, 1);
  frame.writeBigUInt64BE(token, 5);
  frame[13] = key.length;
  frame.set(key, 14);
  return frame;
}

function validKey(key) {
  const k = encodeField(key, 'key');
  if (k.length === 0) throw new InvalidRequestError('key is empty');
  return k;
}

// ----------------------------------------------------------------- grant

/**
 * A key held through a session, with the grant's fencing token. `await using`
 * it, or call unlock(). Disposing it after the session was lost throws the
 * SessionLostError: the scoped form reports the loss.
 */
export class Grant {
  #session;
  #raw;
  #held = true;

  constructor(session, key, raw, token) {
    this.#session = session;
    this.#raw = raw;
    /** The key, as it was given to lock(). */
    this.key = key;
    /** The grant's fencing token: pass it to the resources the lock protects. */
    this.token = token;
  }

  /** True until unlock() ran, or the session ended. */
  get held() {
    return this.#held && this.#session.error === null;
  }

  /** Releases this grant, by its token; a second call does nothing. */
  async unlock() {
    if (!this.#held) return;
    this.#held = false;
    await this.#session._unlockRaw(this.#raw, this.token, this.key);
  }

  async [asyncDispose]() {
    if (this.#session.error instanceof SessionLostError) {
      this.#held = false;
      throw this.#session._endedError();
    }
    await this.unlock();
  }
}

// --------------------------------------------------------------- session

class Call {
  constructor(action, key = EMPTY, token = 0n, internal = null) {
    this.action = action;
    this.key = key; // bytes
    this.keyId = key.length ? Buffer.from(key).toString('latin1') : '';
    this.token = token; // the request's token; for a Cancel, its Lock's id
    this.id = 0;
    this.sent = false;
    this.sentAt = 0;
    // A Lock or TryLock sent on a connection lost before its answer: it is
    // sent again after the resume with the same id (Reissue).
    this.reissue = false;
    this.dropped = false; // given up before it was sent: skipped
    this.gaveUp = false; // the caller stopped waiting after it was sent
    this.finished = false; // the caller has its outcome (or gave up)
    this.resolve = null;
    this.reject = null;
    // The session's own calls (Ping, Cancel, give-backs) have no promise:
    // their outcome goes to this callback.
    this.internal = internal;
  }
}
const EMPTY = new Uint8Array(0);
const noop = () => {};

/** Opens a session; see Session.open. */
export function openSession(options) {
  return Session.open(options);
}

/**
 * A Locking-Center session. Open it with `await openSession({...})` (or
 * `Session.open`), hold keys with `lock`, end it with `close()` or
 * `await using`.
 */
export class Session {
  #targets;
  #tls;
  #where = '';
  #source;
  #auth;
  #ttlMs;
  #id = 0n;
  #ttl = 0;
  #socket = null;
  #inbox = Buffer.alloc(0);
  // The calls not yet written, in order.
  #queue = [];
  // The calls written on the current connection awaiting their answer, by id.
  #pending = new Map();
  #nextId = 0;
  // Every grant the program holds through this session: key bytes (latin1)
  // to token, and to the id of the request that made it.
  #held = new Map();
  #heldId = new Map();
  // The ids no new request may take: those of the grants the program holds
  // and of the Locks and TryLocks waiting to be reissued. Reissue finds a
  // grant by its request's id, so an id reused while its grant is held would
  // find the wrong request's.
  #reserved = new Set();
  // Grants the session may hold that nobody owns: { key, keyId, token }.
  #strays = [];
  // When the latest answered request was sent (performance.now()): the
  // server heard from the session no earlier, so its holds last at least
  // until confirmed + ttl.
  #confirmed = 0;
  #lastSent = 0;
  #ping = null;
  #timer = undefined;
  #pumpQueued = false;
  #writeBlockedSince = -1;
  #closing = false;
  #closeOk = false;
  #error = null;
  #ended = new AbortController();
  #resolveDone;
  #done = new Promise((resolve) => {
    this.#resolveDone = resolve;
  });

  /** @internal use Session.open() or openSession(). */
  constructor(options, opened) {
    if (opened !== OPENING) throw new TypeError('use Session.open() or openSession() to open a session');
    const opts = typeof options === 'string' || Array.isArray(options) ? { address: options } : (options ?? {});
    const address = opts.address ?? process.env.LC_ADDRESS ?? `localhost:${DEFAULT_PORT}`;
    this.#targets = parseAddresses(address);
    this.#tls = tlsOptionsOf(opts.tls);
    this.#source = opts.source ?? '';
    this.#auth = opts.authToken ?? '';
    if (opts.ttl != null && !(opts.ttl >= 0)) throw new InvalidRequestError('ttl must be a positive number of milliseconds');
    this.#ttlMs = opts.ttl == null ? 0 : Math.min(Math.max(Math.round(opts.ttl), 1), MAX_ID);
    encodeOpen({ ttlMs: this.#ttlMs, source: this.#source, auth: this.#auth }); // refuse bad input now
    /** Milliseconds allowed for each attempt to connect and open (or resume) on one address. */
    this.connectTimeout = opts.connectTimeout ?? 5000;
    /** Milliseconds a request other than Lock waits for its answer (null: as long as the session lives). */
    this.answerTimeout = opts.answerTimeout === undefined ? DEFAULT_ANSWER_TIMEOUT : opts.answerTimeout;
  }

  /**
   * Opens a session. Rejects with UnreachableError (no connection or no
   * answer in time) or RefusedError (wrong auth token, connection limit, a
   * server without sessions).
   */
  static async open(options) {
    const s = new Session(options, OPENING);
    const { socket, answer, sentAt, rest } = await s.#dial(0n, s.connectTimeout);
    s.#id = answer.session;
    s.#ttl = answer.ttlMs;
    s.#confirmed = s.#lastSent = sentAt;
    s.#serve(socket, rest);
    return s;
  }

  /** The session id (the JSON API writes it as 16 hex digits: `id.toString(16).padStart(16, '0')`). */
  get id() {
    return this.#id;
  }

  /** The TTL the server granted, in milliseconds. */
  get ttl() {
    return this.#ttl;
  }

  get source() {
    return this.#source;
  }

  /** The address the session is (or was last) connected to. */
  get address() {
    return this.#where;
  }

  /** null while the session lives; else why it ended (SessionLostError or SessionClosedError). */
  get error() {
    return this.#error;
  }

  /** Aborted when the session ends, with the reason (SessionLostError or SessionClosedError). */
  get signal() {
    return this.#ended.signal;
  }

  /** Resolves (never rejects) when the session ends, with the reason. */
  get done() {
    return this.#done;
  }

  /**
   * Waits for the key in FIFO order behind every earlier waiter (this
   * session's own included: a key it holds is not re-entered) and holds it.
   * Rejects with ResetWhileWaitingError, LockTimeoutError (options.timeout
   * ms), options.signal's reason, SessionLostError. A Lock waiting when the
   * connection drops goes on waiting: it is reissued with its id after the
   * resume (a grant made for it before the drop is returned at once).
   * Whenever it rejects, nothing is held.
   */
  async lock(key, options = {}) {
    const raw = validKey(key);
    const { timeout, signal } = options;
    const answer = await this.#roundTrip(new Call(A.LOCK, raw), {
      timeout,
      signal,
      onTimeout: () => new LockTimeoutError(`not granted within ${timeout} ms`),
    });
    if (answer.status === Answer.OK) return new Grant(this, key, raw, answer.token);
    throw this.#refusal(answer.status, new ResetWhileWaitingError(`lock ${describe(key)} was answered '-': reset while waiting`));
  }

  /**
   * Takes the key if nobody holds it now (this session included): the grant,
   * or null. One pending when the connection drops is reissued after the
   * resume. Rejects with OutcomeUnknownError when it was sent but got no
   * answer within answerTimeout (a grant that comes later is given back:
   * nothing is held).
   */
  async tryLock(key) {
    const raw = validKey(key);
    const answer = await this.#roundTrip(new Call(A.TRY_LOCK, raw), {
      timeout: this.answerTimeout,
      onTimeout: (sent) =>
        sent
          ? new OutcomeUnknownError(`trylock ${describe(key)}: no answer within ${this.answerTimeout} ms; a grant that comes is given back`)
          : new UnreachableError(`trylock ${describe(key)}: not sent within ${this.answerTimeout} ms`),
    });
    if (answer.status === Answer.OK) return new Grant(this, key, raw, answer.token);
    if (answer.status === Answer.NOT_WON) return null;
    throw this.#refusal(answer.status, new RefusedError(`trylock ${describe(key)} was refused`));
  }

  /** Like tryLock, but rejects with NotWonError when the key is held. */
  async tryAcquire(key) {
    const grant = await this.tryLock(key);
    if (grant === null) throw new NotWonError(`key ${describe(key)} is held by someone else`);
    return grant;
  }

  /**
   * Releases this session's grant of key with that token (0n: whichever grant
   * it holds on key); resolves to the released grant's token. Rejects with
   * NotHeldError when the session does not hold it (nothing released), or
   * OutcomeUnknownError when the answer was lost.
   */
  async unlock(key, token = 0n) {
    return this._unlockRaw(validKey(key), token, key);
  }

  /** Waits for one's turn on the key: lock, then unlock at once. */
  async wait(key, options = {}) {
    const grant = await this.lock(key, options);
    await grant.unlock();
  }

  /** Drops the key's holder, whoever it is, and refuses its waiters. */
  async resetByKey(key) {
    await this.#reset(A.RESET_BY_KEY, validKey(key), `reset of key ${describe(key)}`);
  }

  /** Refuses every waiter of the source and releases its keys (default: this session's source). */
  async resetBySource(source = this.#source) {
    await this.#reset(A.RESET_BY_SOURCE, encodeField(source, 'source'), `reset of source ${describe(source)}`);
  }

  /**
   * Runs fn(grant, signal) while holding the key, then unlocks whatever fn
   * does. `signal` aborts when the session is lost; then withLock rejects
   * with SessionLostError even if fn resolved.
   */
  async withLock(key, fn, options = {}) {
    return this.#runHeld(await this.lock(key, options), fn);
  }

  /** Like withLock, but never waits: NotWonError when the key is held. */
  async withTryLock(key, fn) {
    return this.#runHeld(await this.tryAcquire(key), fn);
  }

  /**
   * Ends the session: the server refuses its pending Locks and releases every
   * key it holds at once. When the server cannot be told within `timeout` ms
   * (default: the TTL plus connectTimeout), everything stops anyway and a
   * process warning says so: the server then releases the holds when the TTL
   * passes. Never rejects.
   */
  async close({ timeout } = {}) {
    if (this.#error !== null) return;
    this.#closing = true;
    const limit = timeout ?? this.#ttl + this.connectTimeout;
    const deadline = performance.now() + limit;
    try {
      for (;;) {
        try {
          await this.#roundTrip(new Call(A.CLOSE), { timeout: Math.max(deadline - performance.now(), 0) });
          break;
        } catch (err) {
          if (!(err instanceof DisconnectedError)) throw err; // sent again after the resume
        }
      }
    } catch (err) {
      if (!(err instanceof SessionClosedError || err instanceof SessionLostError)) {
        process.emitWarning(
          `session ${hex(this.#id)}: close not confirmed (${err.message}); the server releases its holds when its TTL (${this.#ttl} ms) passes`,
          { type: 'LockingCenterWarning' },
        );
      }
    } finally {
      this.#finish(new SessionClosedError(`session ${hex(this.#id)} closed`));
    }
  }

  /** close(), then rejects with the SessionLostError if the session had been lost. */
  async [asyncDispose]() {
    const lost = this.#error instanceof SessionLostError;
    await this.close();
    if (lost) throw this._endedError();
  }

  // ------------------------------------------------------------- calls

  /** @internal */
  async _unlockRaw(raw, token, key) {
    const tok = uint(token, 64, 'token');
    const answer = await this.#roundTrip(new Call(A.UNLOCK, raw, tok), {
      timeout: this.answerTimeout,
      onTimeout: (sent) =>
        sent
          ? new OutcomeUnknownError(`unlock ${describe(key)}: no answer within ${this.answerTimeout} ms; it may have taken effect`)
          : new UnreachableError(`unlock ${describe(key)}: not sent within ${this.answerTimeout} ms`),
    });
    if (answer.status === Answer.OK) return answer.token;
    throw this.#refusal(answer.status, new NotHeldError(`unlock ${describe(key)}: this session does not hold that grant`));
  }

  async #reset(action, raw, what) {
    const answer = await this.#roundTrip(new Call(action, raw), {
      timeout: this.answerTimeout,
      onTimeout: (sent) =>
        sent
          ? new OutcomeUnknownError(`${what}: no answer within ${this.answerTimeout} ms; it may have taken effect`)
          : new UnreachableError(`${what}: not sent within ${this.answerTimeout} ms`),
    });
    if (answer.status !== Answer.OK) throw this.#refusal(answer.status, new RefusedError(`${what} was refused`));
  }

  async #runHeld(grant, fn) {
    let result;
    try {
      result = await fn(grant, this.#ended.signal);
    } catch (err) {
      if (this.#error instanceof SessionLostError) throw this._endedError();
      await grant.unlock().catch(noop);
      throw err;
    }
    await grant[asyncDispose]();
    return result;
  }

  #refusal(status, err) {
    if (status === Answer.FAIL) {
      if (this.#closing && err instanceof ResetWhileWaitingError) {
        return new SessionClosedError('lock refused by the close of this session');
      }
      return err;
    }
    return new ProtocolError(`unexpected answer byte 0x${status.toString(16).padStart(2, '0')}`);
  }

  /** @internal A fresh error saying why the session ended. */
  _endedError() {
    const E = this.#error.constructor;
    return new E(this.#error.message);
  }

  #roundTrip(c, { timeout, signal, onTimeout } = {}) {
    return new Promise((resolve, reject) => {
      if (this.#error !== null) {
        reject(this._endedError());
        return;
      }
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      let timer;
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      c.resolve = (v) => {
        cleanup();
        resolve(v);
      };
      c.reject = (e) => {
        cleanup();
        reject(e);
      };
      const onAbort = () => {
        if (c.finished) return; // the outcome came first: it stands
        this.#giveUp(c);
        cleanup();
        reject(signal.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeout != null) {
        timer = setTimeout(() => {
          if (c.finished) return;
          const sent = c.sent || c.reissue;
          this.#giveUp(c);
          cleanup();
          reject(onTimeout ? onTimeout(sent) : new UnreachableError(`no answer within ${timeout} ms`));
        }, timeout);
      }
      this.#enqueue(c);
    });
  }

  #giveUp(c) {
    c.finished = true;
    if (!c.sent && !c.reissue) {
      c.dropped = true; // nothing reached the server
    } else if (c.action === A.LOCK) {
      c.gaveUp = true;
      if (c.sent) {
        const cancel = new Call(A.CANCEL, EMPTY, 0n, noop);
        cancel.token = c.id;
        this.#enqueue(cancel);
      } // else its reissue goes out first, and its Cancel right after it (#take)
    } else {
      c.gaveUp = true; // a TryLock's '+' to come is given back on arrival
    }
  }

  #enqueue(c) {
    this.#queue.push(c);
    if (!this.#pumpQueued) {
      this.#pumpQueued = true;
      queueMicrotask(() => this.#pump());
    }
  }

  #complete(c, r) {
    if (c.internal !== null) {
      c.internal(r);
      return;
    }
    if (c.finished) return;
    c.finished = true;
    if (r instanceof Error) c.reject(r);
    else c.resolve(r);
  }

  #strayUnlock(st) {
    return new Call(A.UNLOCK, st.key, st.token, (r) => {
      if (r instanceof DisconnectedError) this.#strays.push(st); // settled after the next resume
    });
  }

  // -------------------------------------------------------- connection

  // Connects to any address and opens (resume 0n: a new session), each
  // address tried in turn within `timeout` ms (and before `deadline`). An
  // address that does not connect, or connects and closes without an answer
  // (a node with no leader to forward to, a node that dies meanwhile), is
  // passed over for the next; a '-' answer is the cluster's and ends it.
  async #dial(resume, timeout, deadline = null) {
    const errors = [];
    let last;
    for (const ep of await resolveEndpoints(this.#targets, errors)) {
      const t = deadline === null ? timeout : Math.min(timeout, deadline - performance.now());
      if (t <= 0) {
        errors.push("the session's TTL ran out");
        break;
      }
      try {
        const got = await this.#openOn(ep, resume, t);
        this.#where = ep.where;
        return got;
      } catch (err) {
        if (!(err instanceof UnreachableError)) throw err;
        errors.push(err.message);
        last = err.cause ?? err;
      }
    }
    throw unreachableError(this.#targets, errors, last);
  }

  // Connects to one endpoint and opens there.
  async #openOn(ep, resume, timeout) {
    const frame = encodeOpen({ ttlMs: this.#ttlMs, resume, source: this.#source, auth: this.#auth });
    const where = ep.where;
    const started = performance.now();
    let socket;
    try {
      socket = await connectEndpoint(ep, timeout, this.#tls);
    } catch (err) {
      throw new UnreachableError(err instanceof ConnectTimeout ? err.message : `${where}: ${err.message}`, { cause: err });
    }
    socket.setKeepAlive(true, 15000);
    const left = timeout - (performance.now() - started);
    return new Promise((resolve, reject) => {
      let got = Buffer.alloc(0);
      let done = false;
      const fail = (err) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        socket.destroy();
        reject(err);
      };
      const timer = setTimeout(
        () => fail(new UnreachableError(`${where}: no answer to the open within ${timeout} ms`)),
        Math.max(left, 0),
      );
      const onData = (chunk) => {
        got = Buffer.concat([got, chunk]);
        if (got.length < ANSWER_SIZE) return;
        const answer = decodeOpenAnswer(got.subarray(0, ANSWER_SIZE));
        if (answer.status !== Answer.OK) {
          fail(
            resume
              ? new SessionLostError(`the server refused to resume session ${hex(resume)} (it expired or was ended)`)
              : new RefusedError(`${where} refused the session (wrong auth token, connection limit, or unknown version)`),
          );
          return;
        }
        if (answer.ttlMs === 0 || answer.session === 0n) {
          fail(new ProtocolError(`the server opened a session with ttl ${answer.ttlMs} ms and id ${answer.session}`));
          return;
        }
        done = true;
        clearTimeout(timer);
        socket.off('data', onData);
        socket.off('error', onError);
        socket.off('close', onClose);
        resolve({ socket, answer, sentAt, rest: got.subarray(ANSWER_SIZE) });
      };
      const onError = (err) => fail(new UnreachableError(`${where}: ${err.message}`, { cause: err }));
      const onClose = () =>
        fail(
          got.length === 1 && got[0] === Answer.FAIL
            ? new RefusedError(`${where} refused the session (it answered '-' and closed: no session support?)`)
            : new UnreachableError(`${where}: the connection closed without an answer`),
        );
      socket.on('data', onData);
      socket.on('error', onError);
      socket.on('close', onClose);
      const sentAt = performance.now();
      socket.write(frame);
    });
  }

  #serve(socket, rest) {
    if (this.#error !== null) {
      socket.destroy();
      return;
    }
    this.#socket = socket;
    this.#inbox = Buffer.from(rest);
    let cause = null;
    socket.on('data', (chunk) => {
      if (this.#socket === socket) this.#read(chunk);
    });
    socket.on('drain', () => {
      this.#writeBlockedSince = -1;
      if (this.#socket === socket) this.#pump();
    });
    socket.on('error', (err) => {
      cause = err;
    });
    socket.on('close', () => this.#connectionLost(socket, cause));
    if (this.#inbox.length) this.#read(Buffer.alloc(0));
    this.#pump();
  }

  #connectionLost(socket, cause) {
    if (this.#socket !== socket) return;
    this.#socket = null;
    this.#writeBlockedSince = -1;
    clearTimeout(this.#timer);
    if (this.#error !== null) return;
    if (this.#closing && this.#closeOk) {
      this.#finish(new SessionClosedError(`session ${hex(this.#id)} closed`));
      return;
    }
    this.#disconnected(cause ?? new Error('the server closed the connection'));
    this.#resume().then(
      ({ socket: next, rest }) => this.#serve(next, rest),
      (err) => this.#finish(this.#closing ? new SessionClosedError(`session ${hex(this.#id)} closed`) : err),
    );
  }

  #read(chunk) {
    let buf = this.#inbox.length ? Buffer.concat([this.#inbox, chunk]) : chunk;
    let off = 0;
    while (buf.length - off >= ANSWER_SIZE) {
      this.#deliver(buf.readUInt32BE(off), buf[off + 4], buf.readBigUInt64BE(off + 5));
      off += ANSWER_SIZE;
    }
    this.#inbox = Buffer.from(buf.subarray(off));
    if (this.#queue.length) this.#pump(); // the pending bound may have held requests back
  }

  #deliver(id, status, token) {
    const c = this.#pending.get(id);
    if (c === undefined) return; // no pending request has that id
    this.#pending.delete(id);
    if (c.sentAt > this.#confirmed) this.#confirmed = c.sentAt;
    if (c === this.#ping) this.#ping = null;
    if ((c.action === A.LOCK || c.action === A.TRY_LOCK) && status === Answer.OK) {
      if (c.gaveUp) {
        // The grant crossed the Cancel (or the caller's end): nobody owns it,
        // so it goes back at once, by its token.
        this.#enqueue(this.#strayUnlock({ key: c.key, keyId: c.keyId, token }));
      } else {
        this.#held.set(c.keyId, token);
        this.#heldId.set(c.keyId, c.id);
        this.#reserved.add(c.id);
      }
    }
    this.#complete(c, { status, token });
    if (c.action === A.CLOSE && status === Answer.OK) this.#closeOk = true;
  }

  // Writes what may be sent now, in one write, and the Ping when one is due;
  // then arms the timer for the next Ping or the dead-Ping check.
  #pump() {
    this.#pumpQueued = false;
    const socket = this.#socket;
    if (socket === null || this.#error !== null) return;
    const now = performance.now();
    const every = this.#ttl / 3; // Ping when nothing was sent for this long
    const deadAfter = this.#ttl / 3; // a Ping unanswered this long: the connection is dead
    const ping = this.#ping;
    if (ping !== null && ping.sent && now - ping.sentAt >= deadAfter) {
      socket.destroy(new Error(`no answer to Ping for ${Math.round(deadAfter)} ms`));
      return;
    }
    if (this.#writeBlockedSince >= 0 && now - this.#writeBlockedSince >= Math.max(every, 1000)) {
      socket.destroy(new Error('a write did not complete in time'));
      return;
    }
    if (ping === null && (now - this.#lastSent >= every || now - this.#confirmed >= every)) {
      this.#ping = new Call(A.PING, EMPTY, 0n, noop);
      this.#queue.push(this.#ping);
    }
    if (this.#writeBlockedSince < 0) {
      const buf = this.#take(now);
      if (buf !== null && !socket.write(buf)) this.#writeBlockedSince = now;
    }
    let wait;
    if (this.#ping !== null && this.#ping.sent) wait = this.#ping.sentAt + deadAfter - now;
    else if (this.#ping !== null) wait = every; // held back: an answer or 'drain' pumps again
    else wait = Math.min(this.#lastSent, this.#confirmed) + every - now;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#pump(), Math.max(wait, 1));
  }

  // Moves the queued calls the server may receive now into pending and
  // returns their frames (null: none). A call is held back while the pending
  // bound is reached; the last place is kept for a Ping.
  #take(now) {
    const frames = [];
    const rest = [];
    for (const c of this.#queue) {
      if (c.dropped) continue;
      if (c.action !== A.CANCEL && this.#pending.size >= (c.action === A.PING ? MAX_PENDING : MAX_PENDING - 1)) {
        rest.push(c);
        continue;
      }
      c.sent = true;
      c.sentAt = now;
      if (c.action === A.CANCEL) {
        frames.push(frameOf(A.CANCEL, c.token, 0n, EMPTY));
        continue;
      }
      if (c.reissue) this.#reserved.delete(c.id);
      if (!c.reissue || this.#pending.has(c.id)) {
        let id = this.#nextId;
        while (this.#pending.has(id) || this.#reserved.has(id)) id = (id + 1) >>> 0;
        this.#nextId = (id + 1) >>> 0;
        c.id = id;
      }
      this.#pending.set(c.id, c);
      if (c.action === A.UNLOCK && c.internal === null) {
        const tok = this.#held.get(c.keyId);
        if (tok !== undefined && (c.token === 0n || c.token === tok)) this.#forgetHeld(c.keyId);
      }
      frames.push(frameOf(c.action, c.id, c.token, c.key));
      if (c.action === A.LOCK && c.gaveUp) {
        // A reissue whose caller gave up before it went out: withdrawn at once
        // (a grant it finds is given back when its '+' comes).
        frames.push(frameOf(A.CANCEL, c.id, 0n, EMPTY));
      }
    }
    if (rest.length < this.#queue.length) this.#lastSent = now;
    this.#queue = rest;
    return frames.length ? Buffer.concat(frames) : null;
  }

  // The program no longer holds the key: its grant's id is free again.
  #forgetHeld(keyId) {
    this.#held.delete(keyId);
    this.#reserved.delete(this.#heldId.get(keyId));
    this.#heldId.delete(keyId);
  }

  // Settles the calls that waited on the lost connection: its Locks and
  // TryLocks are queued to be reissued with their ids, first, in the order
  // they were sent; the others fail.
  #disconnected(cause) {
    const why = `the session's connection to ${this.#where} broke (${cause.message})`;
    const pending = this.#pending;
    this.#pending = new Map();
    const reissue = [];
    for (const c of pending.values()) {
      if (c.action === A.LOCK || c.action === A.TRY_LOCK) {
        if (c.internal === null && !c.gaveUp) {
          // Sent again with its id after the resume: the server answers the
          // grant it made for it, if it made one.
          c.sent = false;
          c.reissue = true;
          this.#reserved.add(c.id);
          reissue.push(c);
          continue;
        }
        this.#strays.push({ key: c.key, keyId: c.keyId, token: 0n });
        this.#complete(c, new DisconnectedError(why, { cause }));
      } else if (c.action === A.UNLOCK) {
        if (c.internal === null) this.#strays.push({ key: c.key, keyId: c.keyId, token: c.token });
        this.#complete(
          c,
          c.internal === null ? new OutcomeUnknownError(why, { cause }) : new DisconnectedError(why, { cause }),
        );
      } else if (c.action === A.RESET_BY_KEY || c.action === A.RESET_BY_SOURCE) {
        this.#complete(c, new OutcomeUnknownError(why, { cause }));
      } else {
        this.#complete(c, new DisconnectedError(why, { cause }));
      }
    }
    this.#ping = null;
    // Queued Cancels name Locks of the lost connection (a reissue that was
    // given up sends its own); a queued Ping is of no use to the next one.
    reissue.sort((a, b) => a.sentAt - b.sentAt); // stable: the send order within one write
    this.#queue = reissue.concat(this.#queue.filter((c) => c.action !== A.CANCEL && c.action !== A.PING));
  }

  // Reconnects, in rounds over every address, until a server takes the
  // session back, refuses it, or the TTL (counted from the send time of the
  // last answered request) has passed.
  async #resume() {
    let backoff = MIN_BACKOFF_MS;
    for (;;) {
      let left = this.#confirmed + this.#ttl - performance.now();
      if (left <= 0) {
        throw new SessionLostError(
          `session ${hex(this.#id)} lost: its TTL (${this.#ttl} ms) passed without a resume (${describeAddresses(this.#targets)})`,
        );
      }
      if (this.#error !== null) throw this.#error;
      try {
        const got = await this.#dial(this.#id, this.connectTimeout, this.#confirmed + this.#ttl);
        this.#resumed(got.sentAt);
        return got;
      } catch (err) {
        if (err instanceof SessionLostError) throw err;
      }
      left = this.#confirmed + this.#ttl - performance.now();
      const pause = Math.max(Math.min(backoff * (0.5 + Math.random() / 2), left), 0);
      await new Promise((resolve) => {
        const t = setTimeout(done, pause);
        function done() {
          clearTimeout(t);
          signal.removeEventListener('abort', done);
          resolve();
        }
        const signal = this.#ended.signal;
        signal.addEventListener('abort', done, { once: true });
      });
      backoff = Math.min(2 * backoff, MAX_BACKOFF_MS);
    }
  }

  // Restarts the TTL and puts the unlocks of the strays first in the queue,
  // so that they reach the server before any new request (a new Lock of the
  // same key must not be released by them).
  #resumed(sentAt) {
    this.#confirmed = this.#lastSent = sentAt;
    const head = [];
    const unknown = new Set();
    for (const st of this.#strays) {
      const tok = this.#held.get(st.keyId);
      if (tok !== undefined && (st.token === 0n || st.token === tok)) continue; // held by the program: no stray
      if (st.token === 0n) {
        if (unknown.has(st.keyId)) continue;
        unknown.add(st.keyId);
      }
      head.push(this.#strayUnlock(st));
    }
    this.#strays = [];
    this.#queue = head.concat(this.#queue);
  }

  // Ends the session with err (once): every call rejects, `done` resolves,
  // `signal` aborts, the connection is dropped.
  #finish(err) {
    if (this.#error !== null) return;
    this.#error = err;
    clearTimeout(this.#timer);
    const socket = this.#socket;
    this.#socket = null;
    socket?.destroy();
    const pending = this.#pending;
    this.#pending = new Map();
    for (const c of pending.values()) this.#complete(c, err);
    const queue = this.#queue;
    this.#queue = [];
    for (const c of queue) if (!c.dropped) this.#complete(c, err);
    this.#strays = [];
    this.#held.clear();
    this.#heldId.clear();
    this.#reserved.clear();
    this.#resolveDone(err);
    this.#ended.abort(err);
  }
}

const OPENING = Symbol('opening');

function hex(id) {
  return BigInt(id).toString(16).padStart(16, '0');
}
