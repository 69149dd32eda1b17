/// <reference types="node" />

/** Default TCP port of the lock protocol. */
export declare const DEFAULT_PORT: 22119;
/** Longest key or source, in bytes (UTF-8). */
export declare const MAX_FIELD_BYTES: 127;

/** Action numbers of the wire protocol. */
export declare const Action: Readonly<{
  LOCK: 1;
  UNLOCK: 2;
  RESET_BY_KEY: 3;
  RESET_BY_SOURCE: 4;
  TRY_LOCK: 5;
}>;
export type ActionCode = (typeof Action)[keyof typeof Action];

/** Answer bytes: '+', '-', '#'. */
export declare const Answer: Readonly<{ OK: 0x2b; FAIL: 0x2d; NOT_WON: 0x23 }>;

/** A key or source: a string (sent as UTF-8) or raw bytes. */
export type Text = string | Uint8Array;

/** Base class of every error this package throws. */
export declare class LockingCenterError extends Error {
  constructor(message?: string, options?: ErrorOptions);
}
/** A scoped try-lock (`withTryLock`, `tryAcquire`) found the key held ('#'). */
export declare class NotWonError extends LockingCenterError {
  readonly code: 'LC_NOT_WON';
}
/** A lock was answered '-': its key or source was reset while it waited. */
export declare class ResetWhileWaitingError extends LockingCenterError {
  readonly code: 'LC_RESET';
}
/** Unlock, a reset or TryLock was answered '-' (unlock: the key was not held). */
export declare class RefusedError extends LockingCenterError {
  readonly code: 'LC_REFUSED' | 'LC_INVALID';
}
/** The key, source or address was refused before any connection was opened. */
export declare class InvalidRequestError extends RefusedError {
  readonly code: 'LC_INVALID';
}
/** Connecting failed or timed out, or the connection ended without an answer. */
export declare class UnreachableError extends LockingCenterError {
  readonly code: 'LC_UNREACHABLE';
}
/** The `timeout` option passed before the lock was granted; the waiter was withdrawn. */
export declare class LockTimeoutError extends LockingCenterError {
  readonly code: 'LC_TIMEOUT';
}
/** The server answered a byte the protocol does not allow here. */
export declare class ProtocolError extends LockingCenterError {
  readonly code: 'LC_PROTOCOL';
}

export interface ClientOptions {
  /** `host:port` of the server; default `$LC_ADDRESS`, then `localhost:22119`. */
  address?: string;
  /** Who is asking, 0..127 bytes; empty lets the server use your IP address. */
  source?: Text;
  /** Milliseconds allowed to open a connection (default 5000). */
  connectTimeout?: number;
  /** Milliseconds allowed for a non-waiting request's answer (default 30000; null: forever). */
  ioTimeout?: number | null;
}

export interface WaitOptions {
  /** Gives up waiting when aborted: rejects with `signal.reason`. */
  signal?: AbortSignal;
  /** Gives up after this many milliseconds: rejects with LockTimeoutError. */
  timeout?: number;
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

export declare class Client {
  /** @param options options, or just the address */
  constructor(options?: ClientOptions | string);
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

/** Encodes one request frame; throws InvalidRequestError for invalid input. */
export declare function encodeFrame(action: number, key: Text, source: Text): Buffer;
/** Splits 'host:port', '[v6]:port' or 'host' (port 22119). */
export declare function parseAddress(address: string): { host: string; port: number };
