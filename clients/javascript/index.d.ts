// Types of the locking-center package. Self-contained on purpose: they need
// no @types/node and no particular `lib` setting, so they check in a fresh
// TypeScript project under --strict. Node's own types (Buffer, AbortSignal)
// are assignable to the small interfaces declared here.

declare global {
  // What `await using` needs, declared as @types/node and lib.esnext.disposable
  // declare it (the declarations merge when either is present too).
  interface SymbolConstructor {
    readonly dispose: unique symbol;
    readonly asyncDispose: unique symbol;
  }
  interface Disposable {
    [Symbol.dispose](): void;
  }
  interface AsyncDisposable {
    [Symbol.asyncDispose](): PromiseLike<void>;
  }
}

/** Default TCP port of the lock protocol. */
export declare const DEFAULT_PORT: 22119;
/** Longest key, source or auth token, in bytes (UTF-8). */
export declare const MAX_FIELD_BYTES: 127;
/** Milliseconds a request other than Lock waits for its answer by default (30000). */
export declare const DEFAULT_ANSWER_TIMEOUT: 30000;

/** Action numbers of the v1 wire protocol. */
export declare const Action: Readonly<{
  LOCK: 1;
  UNLOCK: 2;
  RESET_BY_KEY: 3;
  RESET_BY_SOURCE: 4;
  TRY_LOCK: 5;
}>;
export type ActionCode = (typeof Action)[keyof typeof Action];

/** Action numbers inside a session; 16 opens one. */
export declare const SessionAction: Readonly<{
  OPEN: 16;
  LOCK: 1;
  UNLOCK: 2;
  RESET_BY_KEY: 3;
  RESET_BY_SOURCE: 4;
  TRY_LOCK: 5;
  CANCEL: 6;
  PING: 7;
  CLOSE: 8;
}>;
export type SessionActionCode = (typeof SessionAction)[keyof typeof SessionAction];

/** Answer bytes: '+', '-', '#'. */
export declare const Answer: Readonly<{ OK: 0x2b; FAIL: 0x2d; NOT_WON: 0x23 }>;

/** A key, source or auth token: a string (sent as UTF-8) or raw bytes. */
export type Text = string | Uint8Array;

/**
 * The part of an AbortSignal this package uses; the global AbortSignal (of
 * Node.js or the DOM) fits it.
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason: any;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** The `code` of every error of this package, one per class. */
export type ErrorCode =
  | 'LC_ERROR'
  | 'LC_NOT_WON'
  | 'LC_RESET'
  | 'LC_REFUSED'
  | 'LC_INVALID'
  | 'LC_NOT_HELD'
  | 'LC_UNREACHABLE'
  | 'LC_TIMEOUT'
  | 'LC_PROTOCOL'
  | 'LC_OUTCOME_UNKNOWN'
  | 'LC_DISCONNECTED'
  | 'LC_SESSION_LOST'
  | 'LC_SESSION_CLOSED';

/** Base class of every error this package throws; `code` tells the subclass. */
export declare class LockingCenterError extends Error {
  constructor(message?: string, options?: { cause?: unknown });
  readonly code: ErrorCode;
}
/** A scoped try-lock (`withTryLock`, `tryAcquire`) found the key held ('#'). */
export declare class NotWonError extends LockingCenterError {
  readonly code: 'LC_NOT_WON';
}
/** A lock was answered '-': its key or source was reset while it waited. Nothing is held. */
export declare class ResetWhileWaitingError extends LockingCenterError {
  readonly code: 'LC_RESET';
}
/** A reset or TryLock was answered '-', a v1 unlock of a key not held, or a session refused. */
export declare class RefusedError extends LockingCenterError {
  readonly code: 'LC_REFUSED' | 'LC_INVALID' | 'LC_NOT_HELD';
}
/** The key, source, auth token or address was refused before anything was sent. */
export declare class InvalidRequestError extends RefusedError {
  readonly code: 'LC_INVALID';
}
/** A session's unlock was answered '-': it does not hold that grant. Nothing was released. */
export declare class NotHeldError extends RefusedError {
  readonly code: 'LC_NOT_HELD';
}
/** Connecting failed or timed out, or no answer came in time. */
export declare class UnreachableError extends LockingCenterError {
  readonly code: 'LC_UNREACHABLE';
}
/** The `timeout` option passed before the lock was granted; the waiter was withdrawn, nothing is held. */
export declare class LockTimeoutError extends LockingCenterError {
  readonly code: 'LC_TIMEOUT';
}
/** The server answered bytes the protocol does not allow here. */
export declare class ProtocolError extends LockingCenterError {
  readonly code: 'LC_PROTOCOL';
}
/**
 * An unlock or reset was sent but its answer was lost, or a session's tryLock
 * got no answer within answerTimeout: it may or may not have taken effect. It
 * is never sent again blindly.
 */
export declare class OutcomeUnknownError extends LockingCenterError {
  readonly code: 'LC_OUTCOME_UNKNOWN';
}
/** The session's connection broke before the answer to a Ping or a Close (a Lock or TryLock is reissued instead). */
export declare class DisconnectedError extends LockingCenterError {
  readonly code: 'LC_DISCONNECTED';
}
/** The session was lost (its resume refused, or its TTL passed): every hold it had is gone. */
export declare class SessionLostError extends LockingCenterError {
  readonly code: 'LC_SESSION_LOST';
}
/** The session was closed by close(). */
export declare class SessionClosedError extends LockingCenterError {
  readonly code: 'LC_SESSION_CLOSED';
}

/**
 * One address or several: `'host:port'`, a comma-separated list
 * (`'a:22119,b:22119,c:22119'`) or an array of `'host:port'` strings or
 * `{ host, port }` objects. A name with several DNS records counts as several.
 */
export type Addresses = string | ReadonlyArray<string | { host: string; port?: number }>;

/**
 * TLS, for a server with TLS_CERT and TLS_KEY: the options of Node's
 * `tls.connect` (`ca`: the CA bundle, else the system's roots; `cert` and `key`
 * for a server with TLS_CLIENT_CA; `servername`: the name the certificate must
 * carry, default the host of the address). `true`: TLS with the system's roots.
 */
export interface TlsOptions {
  ca?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  cert?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  key?: string | Uint8Array | ReadonlyArray<string | Uint8Array>;
  passphrase?: string;
  servername?: string;
  minVersion?: 'TLSv1.2' | 'TLSv1.3';
  [option: string]: unknown;
}

export interface WaitOptions {
  /** Gives up waiting when aborted: rejects with `signal.reason`. */
  signal?: AbortSignalLike;
  /** Gives up after this many milliseconds: rejects with LockTimeoutError. */
  timeout?: number;
}

// ---------------------------------------------------------------- sessions

export interface SessionOptions {
  /** The server's address, or several (a cluster's nodes); default `$LC_ADDRESS`, then `localhost:22119`. */
  address?: Addresses;
  /** TLS (tls.connect options, or true for the system's roots); omitted: plain TCP. */
  tls?: TlsOptions | boolean;
  /** TTL in milliseconds (clamped by the server to 1000 … 600000); default the server's SESSION_TTL. */
  ttl?: number;
  /** Who is asking, 0..127 bytes; empty lets the server use your IP address. */
  source?: Text;
  /** The server's AUTH_TOKEN, when it has one. */
  authToken?: Text;
  /** Milliseconds allowed for each attempt to connect and open (or resume) on one address (default 5000). */
  connectTimeout?: number;
  /** Milliseconds a request other than Lock waits for its answer (default 30000; null: as long as the session lives). */
  answerTimeout?: number | null;
}

/** A key held through a session, with its fencing token. `await using` it, or call `unlock()`. */
export declare class Grant implements AsyncDisposable {
  private constructor();
  /** The key, as it was given to lock(). */
  readonly key: Text;
  /** The grant's fencing token: pass it to the resources the lock protects. */
  readonly token: bigint;
  /** True until `unlock()` ran, or the session ended. */
  get held(): boolean;
  /** Releases this grant, by its token; a second call does nothing. */
  unlock(): Promise<void>;
  /** Unlocks; rejects with SessionLostError when the session was lost (the scoped form reports it). */
  [Symbol.asyncDispose](): Promise<void>;
}

/** A Locking-Center session: one connection, many concurrent requests, holds that end with it. */
export declare class Session implements AsyncDisposable {
  private constructor();
  /** Opens a session; rejects with UnreachableError or RefusedError. */
  static open(options?: SessionOptions | Addresses): Promise<Session>;
  /** Milliseconds allowed to connect and open (or resume). */
  connectTimeout: number;
  /** Milliseconds a request other than Lock waits for its answer. */
  answerTimeout: number | null;
  /** The session id (the JSON API writes it as 16 hex digits). */
  readonly id: bigint;
  /** The TTL the server granted, in milliseconds. */
  readonly ttl: number;
  /** The address the session is (or was last) connected to. */
  readonly address: string;
  readonly source: Text;
  /** null while the session lives; else why it ended. */
  readonly error: SessionLostError | SessionClosedError | null;
  /** Aborted when the session ends, with the reason (SessionLostError or SessionClosedError). */
  readonly signal: AbortSignalLike;
  /** Resolves (never rejects) when the session ends, with the reason. */
  readonly done: Promise<SessionLostError | SessionClosedError>;

  /** Waits for the key in FIFO order and holds it; a rejection means nothing is held. */
  lock(key: Text, options?: WaitOptions): Promise<Grant>;
  /** Takes the key if nobody holds it now (this session included): the grant, or null. */
  tryLock(key: Text): Promise<Grant | null>;
  /** Like tryLock, but rejects with NotWonError when the key is held. */
  tryAcquire(key: Text): Promise<Grant>;
  /** Releases this session's grant of key with that token (0n: any of its own); resolves to the released token. */
  unlock(key: Text, token?: bigint): Promise<bigint>;
  /** Waits for one's turn on the key: lock, then unlock at once. */
  wait(key: Text, options?: WaitOptions): Promise<void>;
  /** Drops the key's holder, whoever it is, and refuses its waiters. */
  resetByKey(key: Text): Promise<void>;
  /** Refuses every waiter of the source and releases its keys (default: this session's source). */
  resetBySource(source?: Text): Promise<void>;
  /** Runs fn while holding the key, then unlocks; `signal` aborts when the session is lost. */
  withLock<T>(key: Text, fn: (grant: Grant, signal: AbortSignalLike) => T | PromiseLike<T>, options?: WaitOptions): Promise<T>;
  /** Like withLock but never waits: NotWonError when the key is held. */
  withTryLock<T>(key: Text, fn: (grant: Grant, signal: AbortSignalLike) => T | PromiseLike<T>): Promise<T>;
  /** Ends the session: its keys are released at once. Never rejects. */
  close(options?: { timeout?: number }): Promise<void>;
  /** close(); then rejects with SessionLostError if the session had been lost. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Opens a session (the same as Session.open). */
export declare function openSession(options?: SessionOptions | Addresses): Promise<Session>;

// --------------------------------------------------------------------- v1

export interface ClientOptions {
  /** The server's address, or several (a cluster's nodes); default `$LC_ADDRESS`, then `localhost:22119`. */
  address?: Addresses;
  /** TLS (tls.connect options, or true for the system's roots); omitted: plain TCP. */
  tls?: TlsOptions | boolean;
  /** Who is asking, 0..127 bytes; empty lets the server use your IP address. */
  source?: Text;
  /** Milliseconds allowed for each connection attempt (default 5000). */
  connectTimeout?: number;
  /** Milliseconds allowed for a non-waiting request's answer (default 30000; null: forever). */
  ioTimeout?: number | null;
}

/** A key this client was granted. `await using` it, or call `unlock()`. */
export declare class HeldLock implements AsyncDisposable {
  readonly key: Text;
  /** True until `unlock()` has been called. */
  get held(): boolean;
  /** Releases the key; a second call does nothing. */
  unlock(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** The one-request-per-connection client: its holds outlive it (no session). */
export declare class Client {
  /** @param options options, or just the address */
  constructor(options?: ClientOptions | Addresses);
  /** Milliseconds allowed to open a connection. */
  connectTimeout: number;
  /** Milliseconds allowed for a non-waiting request's answer. */
  ioTimeout: number | null;
  readonly address: string;
  readonly source: Text;

  /** Waits for the key in FIFO order and holds it. */
  lock(key: Text, options?: WaitOptions): Promise<HeldLock>;
  /** Takes the key if it is free now (true); false if anyone holds it. */
  tryLock(key: Text): Promise<boolean>;
  /** Scoped try-lock: a HeldLock, or NotWonError when someone holds the key. */
  tryAcquire(key: Text): Promise<HeldLock>;
  /** Releases the key; RefusedError if it was not held. */
  unlock(key: Text): Promise<void>;
  /** Waits for one's turn on the key: lock, then unlock at once. */
  wait(key: Text, options?: WaitOptions): Promise<void>;
  /** Drops the key's holder; every waiter on it gets '-'. */
  resetByKey(key: Text): Promise<void>;
  /** Fails every waiter of the source and releases its keys (default: this client's source). */
  resetBySource(source?: Text): Promise<void>;
  /** Runs `fn` while holding the key, then unlocks whatever happens; resolves to its result. */
  withLock<T>(key: Text, fn: (held: HeldLock) => T | PromiseLike<T>, options?: WaitOptions): Promise<T>;
  /** Like `withLock` but never waits: NotWonError when the key is held. */
  withTryLock<T>(key: Text, fn: (held: HeldLock) => T | PromiseLike<T>): Promise<T>;
}

// ---------------------------------------------------------------- codecs

/** Encodes one v1 request frame; throws InvalidRequestError for invalid input. */
export declare function encodeFrame(action: number, key: Text, source: Text): Uint8Array;
/** Encodes a session open (`resume` 0n: a new session); throws InvalidRequestError for invalid input. */
export declare function encodeOpen(open?: {
  version?: number;
  ttlMs?: number;
  resume?: bigint;
  source?: Text;
  auth?: Text;
}): Uint8Array;
/** Decodes the 13-byte answer to an open. */
export declare function decodeOpenAnswer(bytes: Uint8Array): { status: number; ttlMs: number; session: bigint };
/** Encodes one session request; throws InvalidRequestError for invalid input. */
export declare function encodeRequest(action: number, id: number, token: bigint, key: Text): Uint8Array;
/** Decodes one 13-byte session answer. */
export declare function decodeAnswer(bytes: Uint8Array): { id: number; status: number; token: bigint };
/** Splits 'host:port', '[v6]:port' or 'host' (port 22119). */
export declare function parseAddress(address: string): { host: string; port: number };
/** Splits one address, a comma-separated list, or an array of addresses. */
export declare function parseAddresses(address: Addresses): Array<{ host: string; port: number }>;
