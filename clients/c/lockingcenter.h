/*
 * lockingcenter.h - C client for the Locking-Center lock server.
 *
 * Wire protocol (one request per TCP connection):
 *
 *   request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
 *   answer  : one byte, '+' success, '-' failure, '#' try-lock not won
 *
 * Every call connects, writes the whole frame in one write, reads exactly one
 * byte and closes the socket. Giving up on a waiting lock (timeout or cancel
 * token) shuts down the socket's write side, which makes the server withdraw
 * the waiter, and reads on for up to 2 s: a grant that crossed the hang-up is
 * returned as LC_OK (the key is then held) instead of being lost.
 *
 * Thread safety: an lc_client is read-only once lc_client_init has returned,
 * and every call uses its own socket, so one lc_client may be shared by any
 * number of threads without locking. Do not change its fields while another
 * thread uses it. An lc_cancel may be triggered from any thread (and from a
 * signal handler: lc_cancel_trigger only calls write(2)).
 *
 * The library keeps no global state and never installs signal handlers;
 * SIGPIPE is avoided with MSG_NOSIGNAL (or SO_NOSIGPIPE where that exists).
 */
#ifndef LOCKINGCENTER_H
#define LOCKINGCENTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LC_VERSION "0.1.0"

/* Default TCP port of the lock protocol. */
#define LC_DEFAULT_PORT "22119"
/* Longest key or source, in bytes (the sizes are signed bytes on the wire). */
#define LC_MAX_NAME 127
/* Longest frame: action, key size, key, source size, source. */
#define LC_MAX_FRAME (3 + 2 * LC_MAX_NAME)

/* Wire actions. */
typedef enum lc_action {
    LC_ACTION_LOCK = 1,
    LC_ACTION_UNLOCK = 2,
    LC_ACTION_RESET_BY_KEY = 3,
    LC_ACTION_RESET_BY_SOURCE = 4,
    LC_ACTION_TRYLOCK = 5
} lc_action;

/* Result of every call. LC_OK is 0; lc_strerror gives a sentence. */
typedef enum lc_err {
    LC_OK = 0,
    /* lc_with_trylock: the key is held by someone else (answer '#'). */
    LC_ERR_NOT_WON,
    /* lc_lock / lc_wait: the key or this source was reset while waiting (answer '-'). */
    LC_ERR_RESET,
    /* lc_unlock / lc_trylock / lc_reset_*: the server answered '-'
     * (for unlock: the key was not held). */
    LC_ERR_REFUSED,
    /* Refused before anything was sent or any connection opened: key not
     * 1..127 bytes, source longer than 127 bytes, bad address, NULL argument. */
    LC_ERR_INVALID,
    /* Name resolution or connect failed or timed out, the connection broke,
     * or it was closed without an answer. errno holds the cause when known. */
    LC_ERR_UNREACHABLE,
    /* The timeout passed before the answer; a waiting lock was withdrawn. */
    LC_ERR_TIMEOUT,
    /* The cancel token was triggered; a waiting lock was withdrawn. */
    LC_ERR_CANCELED,
    /* The server answered a byte that is not '+', '-' or '#'. */
    LC_ERR_PROTOCOL,
    /* A local system call failed (socket, pipe, poll...); errno holds the cause. */
    LC_ERR_SYSTEM
} lc_err;

/* A static English sentence for err; never NULL. */
const char *lc_strerror(lc_err err);

/*
 * The client: an address and a source, given once. Plain data: it owns no
 * file descriptor or memory, needs no destroy call and may be copied.
 */
typedef struct lc_client {
    char host[256];
    char port[32];
    char source[LC_MAX_NAME + 1];
    /* Time allowed for the TCP connect, in milliseconds (default 5000). */
    int connect_timeout_ms;
    /* Time allowed for the answer of unlock, trylock and the resets, which
     * never wait in a queue, in milliseconds (default 10000; 0: no limit). */
    int io_timeout_ms;
} lc_client;

/*
 * Fills c. address is "host:port", "host" (port 22119), "[v6addr]:port" or
 * NULL for "localhost:22119". source names this requester (0..127 bytes of
 * UTF-8); NULL or "" lets the server use the peer IP address.
 * Returns LC_OK or LC_ERR_INVALID. Resolves nothing and connects nowhere.
 */
lc_err lc_client_init(lc_client *c, const char *address, const char *source);

/*
 * A cancel token: a pipe polled beside the socket. Triggering it makes every
 * lc_lock / lc_wait using it give up with LC_ERR_CANCELED (hanging up, so the
 * server withdraws the waiter; a grant already on its way gives LC_OK
 * instead, see above). It stays triggered, and later calls with it fail at
 * once, until lc_cancel_reset. Pass a token to a call only after
 * lc_cancel_init succeeded (a zeroed struct is not a token).
 */
typedef struct lc_cancel {
    int fds[2];
} lc_cancel;

/* Opens the pipe. LC_OK or LC_ERR_SYSTEM. */
lc_err lc_cancel_init(lc_cancel *t);
/* Triggers the token. Safe from any thread and from a signal handler. */
void lc_cancel_trigger(lc_cancel *t);
/* true once triggered (and until reset). */
bool lc_cancel_triggered(const lc_cancel *t);
/* Untriggers the token. Call it only while no call is using the token. */
void lc_cancel_reset(lc_cancel *t);
/* Closes the pipe. Call it only while no call is using the token. */
void lc_cancel_destroy(lc_cancel *t);

/*
 * Lock: waits in FIFO order until the key is granted.
 * timeout_ms: 0 or negative waits without limit (the connect timeout still
 * applies). cancel: NULL or a token. Returns LC_OK (the key is held; release
 * it with lc_unlock), LC_ERR_RESET, LC_ERR_TIMEOUT, LC_ERR_CANCELED,
 * LC_ERR_INVALID, LC_ERR_UNREACHABLE, LC_ERR_PROTOCOL or LC_ERR_SYSTEM.
 */
lc_err lc_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel);

/*
 * TryLock: takes the key only if it is free now. Returns LC_OK with *won set
 * to true (now held) or false (held by someone: answer '#'); LC_ERR_REFUSED
 * when the server answered '-'; or an error as for lc_lock.
 */
lc_err lc_trylock(const lc_client *c, const char *key, bool *won);

/* Unlock: LC_OK, or LC_ERR_REFUSED when the key was not held. */
lc_err lc_unlock(const lc_client *c, const char *key);

/* Wait: lock, then unlock at once; returns when it was this caller's turn.
 * Arguments and results as for lc_lock. */
lc_err lc_wait(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel);

/* ResetByKey: drops the holder and fails every waiter of key. */
lc_err lc_reset_key(const lc_client *c, const char *key);

/* ResetBySource: fails every waiter of source, releases every key it holds.
 * source NULL means this client's own source ("" there: the peer IP). */
lc_err lc_reset_source(const lc_client *c, const char *source);

/*
 * Scoped form: locks key (as lc_lock), calls fn(arg), then unlocks, whatever
 * fn returned. fn's return value goes to *fn_result when fn_result is not
 * NULL. Returns the lock error (fn not called), else the unlock error, else
 * LC_OK.
 */
typedef int (*lc_locked_fn)(void *arg);
lc_err lc_with_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel,
                    lc_locked_fn fn, void *arg, int *fn_result);

/* As lc_with_lock but with TryLock: LC_ERR_NOT_WON (fn not called) when the
 * key is held by someone else. */
lc_err lc_with_trylock(const lc_client *c, const char *key, lc_locked_fn fn, void *arg,
                       int *fn_result);

/*
 * Encodes one request frame into buf (cap bytes, LC_MAX_FRAME is always
 * enough) and stores its length in *len. Checks the lengths: key 1..127
 * bytes (0..127 for ResetBySource, which ignores it), source 0..127 bytes,
 * action 1..5. NULL key or source is taken as "". Returns LC_OK or
 * LC_ERR_INVALID. Exposed for tests and tools; the calls above use it.
 */
lc_err lc_encode(uint8_t *buf, size_t cap, size_t *len, int action, const char *key,
                 const char *source);

#ifdef __cplusplus
}
#endif

#endif /* LOCKINGCENTER_H */
