/*
 * lockingcenter.h - C client for the Locking-Center lock server.
 *
 * Two ways to talk to the server:
 *
 * - A session (lc_session_*, recommended): one TCP connection shared by any
 *   number of threads, whose holds end with it (at lc_session_close, or one
 *   TTL after the program died or lost the server), with a fencing token in
 *   every grant. See "Sessions" below for its threading model.
 *
 * - v1 (lc_lock, lc_unlock, ...): one request per TCP connection. The client
 *   connects, writes one frame, reads one byte and closes:
 *
 *     request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
 *     answer  : one byte, '+' success, '-' failure, '#' try-lock not won
 *
 *   A v1 grant has no owner: it stays held after the program exits, until an
 *   unlock or a reset. Giving up on a waiting lock (timeout or cancel token)
 *   shuts down the socket's write side, which makes the server withdraw the
 *   waiter, and reads on for up to 2 s: a grant that crossed the hang-up is
 *   returned as LC_OK (the key is then held) instead of being lost.
 *
 *   Thread safety: an lc_client is read-only once lc_client_init has
 *   returned, and every call uses its own socket, so one lc_client may be
 *   shared by any number of threads without locking. Do not change its fields
 *   while another thread uses it.
 *
 * An lc_cancel may be triggered from any thread (and from a signal handler:
 * lc_cancel_trigger only calls write(2)).
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

/* Library version (the CMake package and pkg-config file carry the same). */
#define LC_VERSION "0.3.0"
#define LC_VERSION_MAJOR 0
#define LC_VERSION_MINOR 3
#define LC_VERSION_PATCH 0

/* Public symbols are exported from the shared library; the rest is hidden. */
#if defined(__GNUC__) && defined(LC_BUILDING)
#define LC_API __attribute__((visibility("default")))
#else
#define LC_API
#endif

/* Default TCP port of the lock protocol. */
#define LC_DEFAULT_PORT "22119"
/* Longest key or source, in bytes (the sizes are signed bytes on the wire). */
#define LC_MAX_NAME 127
/* Most addresses in one address list ("h1:p1,h2:p2,..."). */
#define LC_MAX_ADDRESSES 16
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
    LC_ERR_SYSTEM,
    /* Session unlock: this session does not hold that grant (it was reset,
     * released already, or the token is not its own). Nothing was released. */
    LC_ERR_NOT_HELD,
    /* An unlock or reset whose frame may have reached the server but whose
     * answer never came (connection lost, or its timeout passed): it may or
     * may not have taken effect. It is never resent blindly. */
    LC_ERR_OUTCOME_UNKNOWN,
    /* A session ping or close whose request was sent on a connection that
     * broke before the answer. The session is resuming; the call may be made
     * again. (Locks and trylocks are reissued instead: see "Sessions".) */
    LC_ERR_DISCONNECTED,
    /* The session is lost: the server refused to resume it (expired, ended
     * from the web API) or its TTL passed without a resume. Every hold it had
     * is gone (or goes at the server's expiry). Every later call fails so. */
    LC_ERR_SESSION_LOST,
    /* The session was closed by lc_session_close. */
    LC_ERR_SESSION_CLOSED,
    /* TLS failed: the server's certificate is not signed by a trusted CA or
     * does not name the server, the server refused this client's
     * certificate (or its lack of one), or a TLS file could not be loaded. */
    LC_ERR_TLS,
    /* This build has no TLS (it was built without OpenSSL). */
    LC_ERR_UNSUPPORTED
} lc_err;

/* A static English sentence for err; never NULL. */
LC_API const char *lc_strerror(lc_err err);

/* ---- TLS -----------------------------------------------------------------
 *
 * TLS (the server's TLS_CERT / TLS_KEY, and TLS_CLIENT_CA for mutual TLS) is
 * OpenSSL's, when the library was built with it (CMake finds it with
 * FindOpenSSL, the Makefile with pkg-config; a build without it works over
 * plain TCP, lc_tls_available() says false and lc_tls_new gives
 * LC_ERR_UNSUPPORTED). TLS 1.2 or later; the server's certificate must be
 * signed by a trusted CA and name the server: the host of the address being
 * connected to (a DNS name, or an IP address in the certificate's IP SANs),
 * or server_name when it is set.
 */
typedef struct lc_tls lc_tls;

typedef struct lc_tls_options {
    /* PEM bundle of the CAs to trust; NULL: the system's. */
    const char *ca_file;
    /* Client certificate (chain) and its key, PEM, for mutual TLS; both or
     * neither. */
    const char *cert_file;
    const char *key_file;
    /* The name the server's certificate must carry, for every address;
     * NULL: each address's own host. */
    const char *server_name;
} lc_tls_options;

/* true when this build has TLS. */
LC_API bool lc_tls_available(void);
/* Zeroes o: the system's CAs, no client certificate, each address's host. */
LC_API void lc_tls_options_init(lc_tls_options *o);
/* Loads the files into a TLS configuration, which any number of clients and
 * sessions (and threads) may share; free it with lc_tls_free once none uses
 * it. LC_OK with *out; LC_ERR_TLS (a file does not load, or the key does not
 * match the certificate); LC_ERR_INVALID; LC_ERR_UNSUPPORTED. */
LC_API lc_err lc_tls_new(const lc_tls_options *o, lc_tls **out);
LC_API void lc_tls_free(lc_tls *t);

/* One address of a list. */
typedef struct lc_address {
    char host[256];
    char port[32];
} lc_address;

/*
 * The client: its addresses and a source, given once. Plain data: it owns no
 * file descriptor or memory, needs no destroy call and may be copied (tls,
 * when set, is the caller's and must outlive its use).
 *
 * Several addresses (the nodes of a cluster, any of which answers): each
 * call tries them in random order, every address a DNS name resolves to
 * included, until one connects; each attempt has connect_timeout_ms.
 */
typedef struct lc_client {
    /* The first address of the list (as given). */
    char host[256];
    char port[32];
    char source[LC_MAX_NAME + 1];
    /* Time allowed for the TCP connect, in milliseconds (default 5000). */
    int connect_timeout_ms;
    /* Time allowed for the answer of unlock, trylock and the resets, which
     * never wait in a queue, in milliseconds (default 30000, as in every
     * Locking-Center client; 0: no limit). */
    int io_timeout_ms;
    /* Every address of the list, addrs[0] the first. */
    size_t naddrs;
    lc_address addrs[LC_MAX_ADDRESSES];
    /* TLS configuration, or NULL for plain TCP (set it after init). */
    lc_tls *tls;
} lc_client;

/*
 * Fills c. address is "host:port", "host" (port 22119), "[v6addr]:port", a
 * comma-separated list of those (at most LC_MAX_ADDRESSES, spaces around
 * the commas allowed) or NULL for "localhost:22119". source names this
 * requester (0..127 bytes of UTF-8); NULL or "" lets the server use the peer
 * IP address. Returns LC_OK or LC_ERR_INVALID. Resolves nothing and connects
 * nowhere; c->tls is NULL (plain TCP).
 */
LC_API lc_err lc_client_init(lc_client *c, const char *address, const char *source);

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
LC_API lc_err lc_cancel_init(lc_cancel *t);
/* Triggers the token. Safe from any thread and from a signal handler. */
LC_API void lc_cancel_trigger(lc_cancel *t);
/* true once triggered (and until reset). */
LC_API bool lc_cancel_triggered(const lc_cancel *t);
/* Untriggers the token. Call it only while no call is using the token. */
LC_API void lc_cancel_reset(lc_cancel *t);
/* Closes the pipe. Call it only while no call is using the token. */
LC_API void lc_cancel_destroy(lc_cancel *t);

/*
 * Lock: waits in FIFO order until the key is granted.
 * timeout_ms: 0 or negative waits without limit (the connect timeout still
 * applies). cancel: NULL or a token. Returns LC_OK (the key is held; release
 * it with lc_unlock), LC_ERR_RESET, LC_ERR_TIMEOUT, LC_ERR_CANCELED,
 * LC_ERR_INVALID, LC_ERR_UNREACHABLE, LC_ERR_PROTOCOL or LC_ERR_SYSTEM.
 */
LC_API lc_err lc_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel);

/*
 * TryLock: takes the key only if it is free now. Returns LC_OK with *won set
 * to true (now held) or false (held by someone: answer '#'); LC_ERR_REFUSED
 * when the server answered '-'; or an error as for lc_lock.
 */
LC_API lc_err lc_trylock(const lc_client *c, const char *key, bool *won);

/* Unlock: LC_OK, or LC_ERR_REFUSED when the key was not held. */
LC_API lc_err lc_unlock(const lc_client *c, const char *key);

/* Wait: lock, then unlock at once; returns when it was this caller's turn.
 * Arguments and results as for lc_lock. */
LC_API lc_err lc_wait(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel);

/* ResetByKey: drops the holder and fails every waiter of key. */
LC_API lc_err lc_reset_key(const lc_client *c, const char *key);

/* ResetBySource: fails every waiter of source, releases every key it holds.
 * source NULL means this client's own source ("" there: the peer IP). */
LC_API lc_err lc_reset_source(const lc_client *c, const char *source);

/*
 * Scoped form: locks key (as lc_lock), calls fn(arg), then unlocks, whatever
 * fn returned. fn's return value goes to *fn_result when fn_result is not
 * NULL. Returns the lock error (fn not called), else the unlock error, else
 * LC_OK.
 */
typedef int (*lc_locked_fn)(void *arg);
LC_API lc_err lc_with_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel,
                    lc_locked_fn fn, void *arg, int *fn_result);

/* As lc_with_lock but with TryLock: LC_ERR_NOT_WON (fn not called) when the
 * key is held by someone else. */
LC_API lc_err lc_with_trylock(const lc_client *c, const char *key, lc_locked_fn fn, void *arg,
                       int *fn_result);

/*
 * Encodes one request frame into buf (cap bytes, LC_MAX_FRAME is always
 * enough) and stores its length in *len. Checks the lengths: key 1..127
 * bytes (0..127 for ResetBySource, which ignores it), source 0..127 bytes,
 * action 1..5. NULL key or source is taken as "". Returns LC_OK or
 * LC_ERR_INVALID. Exposed for tests and tools; the calls above use it.
 */
LC_API lc_err lc_encode(uint8_t *buf, size_t cap, size_t *len, int action, const char *key,
                 const char *source);


/* ======================================================================
 * Sessions
 *
 * A session is one TCP connection that carries many requests, answered out
 * of order by id, and owns the keys it takes: the server releases them when
 * the session is closed, ended from the web API, or has not been heard from
 * for its TTL (a crashed or killed program's keys free themselves one TTL
 * later). Every grant comes with its fencing token.
 *
 * Threading model. An lc_session is thread-safe: any number of threads may
 * call lc_session_lock, _trylock, _unlock, ... on it at once. Inside, one
 * mutex guards the session's state and each call waits on its own condition
 * variable (a call given an lc_cancel also gets a pipe, so that it can wait
 * for the answer and the token at once). The session runs two threads:
 *
 *   - the supervisor, for the session's life: it writes the queued requests
 *     (it is the connection's only writer), sends Ping when nothing was sent
 *     for a third of the TTL, notices a Ping unanswered for a third of the
 *     TTL, and after a dropped connection reconnects and resumes: each round
 *     tries every address in random order (each attempt bounded by
 *     connect_timeout_ms), with a growing back-off between rounds (50 ms
 *     doubling to 1 s, with jitter), until the session's holds are no
 *     longer certain;
 *   - a reader per connection: it reads the 13-byte answers and hands each
 *     to the call waiting for its id.
 *
 * Both end in lc_session_close, which joins them. Calls never run user code
 * on the session's threads except the on_lost callback (below).
 *
 * Outcomes: LC_OK from lock or trylock means the key is held and *token is
 * its fencing token; any error means this caller holds nothing. A lock that
 * times out or is cancelled sends Cancel and waits (at most 2 s) for the
 * lock's one answer; if the grant crossed the Cancel, the session unlocks it
 * by its token before the call returns.
 *
 * A dropped connection (a server restart, a cluster's leader change):
 * locks and trylocks waiting on it are not failed; after the resume they are
 * sent again with their old ids (Reissue, docs/protocol.md), so that a grant
 * the server made whose answer was lost is found and returned with its
 * token, and otherwise the request waits anew: the caller just goes on
 * waiting. An unlock or reset waiting on it fails with
 * LC_ERR_OUTCOME_UNKNOWN (it may have taken effect; it is never resent
 * blindly), a ping or close with LC_ERR_DISCONNECTED; calls made while the
 * session resumes wait for the new connection. After a resume the session
 * unlocks by token 0 every key a lock it gave up on may have been granted,
 * unless the program holds that key through this session, and sends a lost
 * unlock again by its token, which can release nothing but that grant.
 * While a grant is held, the id of the request that made it is never given
 * to another request.
 *
 * Session lost: when a resume is refused or the holds are no longer certain
 * (the send time of the last answered request plus the TTL has passed: the
 * server, or a cluster's new leader, may release them from then on), the
 * session is lost: every pending and later call fails with
 * LC_ERR_SESSION_LOST, lc_session_state returns it, lc_session_wait_end
 * returns, and on_lost is called once.
 * ====================================================================== */

/* Session request actions (actions 1..5 as in v1, plus these). */
#define LC_ACTION_OPEN 16
#define LC_ACTION_CANCEL 6
#define LC_ACTION_PING 7
#define LC_ACTION_CLOSE 8

/* Sizes of the session frames. */
#define LC_SESSION_OPEN_MAX (16 + 2 * LC_MAX_NAME)
#define LC_SESSION_OPEN_ANSWER_SIZE 13
#define LC_SESSION_REQUEST_MAX (14 + LC_MAX_NAME)
#define LC_SESSION_ANSWER_SIZE 13

typedef struct lc_session lc_session;

/* Called once, on the session's supervisor thread, when the session is lost
 * (why is LC_ERR_SESSION_LOST) — never after lc_session_close. It may call
 * any lc_session_* function but lc_session_close (which joins that thread). */
typedef void (*lc_session_lost_fn)(lc_session *s, lc_err why, void *arg);

/* Settings of lc_session_open. Fill with lc_session_options_init first. */
typedef struct lc_session_options {
    /* "host:port", "host", "[v6]:port", or a comma-separated list of them
     * (a cluster's nodes: see "Several addresses" above); NULL:
     * localhost:22119. */
    const char *address;
    /* Names this program (0..127 bytes); NULL or "": the server uses the IP. */
    const char *source;
    /* The server's AUTH_TOKEN (1..127 bytes), or NULL when it has none. */
    const char *auth;
    /* TTL asked for, in ms; 0 asks for the server's SESSION_TTL (10 s by
     * default). The server clamps it to 1000..600000. */
    uint32_t ttl_ms;
    /* Time allowed for a TCP connect and the open's answer (default 5000). */
    int connect_timeout_ms;
    /* Time allowed for the answer of trylock, unlock and the resets (default
     * 30000, as in every Locking-Center client; <= 0: no limit). Lock waits
     * as long as its own timeout says. */
    int io_timeout_ms;
    /* Told when the session is lost; NULL for none. */
    lc_session_lost_fn on_lost;
    void *on_lost_arg;
    /* TLS configuration (see lc_tls_new), or NULL for plain TCP. It must
     * outlive the session. */
    lc_tls *tls;
} lc_session_options;

/* Default settings: localhost:22119, no source, no auth, the server's TTL,
 * connect 5000 ms, answers 30000 ms, no callback. */
LC_API void lc_session_options_init(lc_session_options *o);

/*
 * Opens a session and starts its threads. Returns LC_OK with *out set;
 * LC_ERR_INVALID (bad address, source or auth over 127 bytes: nothing sent);
 * LC_ERR_UNREACHABLE (no connection, or it closed before the answer);
 * LC_ERR_REFUSED (the server answered '-': wrong AUTH_TOKEN, connection
 * limit, or no session support); LC_ERR_SYSTEM.
 */
LC_API lc_err lc_session_open(const lc_session_options *o, lc_session **out);

/* The session id the server gave (the web API shows it as %016llx). */
LC_API uint64_t lc_session_id(const lc_session *s);
/* The TTL the server granted, in ms. */
LC_API uint32_t lc_session_ttl_ms(const lc_session *s);

/* LC_OK while the session lives (connected or resuming), else
 * LC_ERR_SESSION_LOST or LC_ERR_SESSION_CLOSED. */
LC_API lc_err lc_session_state(lc_session *s);
/* true while the session has a connection (false while it resumes). */
LC_API bool lc_session_connected(lc_session *s);
/* Waits until the session has ended (lost or closed) and, when lost, on_lost
 * has returned, or timeout_ms passed (<= 0: no limit). Returns
 * lc_session_state's value. */
LC_API lc_err lc_session_wait_end(lc_session *s, int timeout_ms);

/*
 * Lock: waits in FIFO order with every other waiter, this session's other
 * locks included (locking a key the session holds waits, as a non-reentrant
 * mutex does). timeout_ms <= 0: no limit. cancel: NULL or a token.
 * LC_OK with *token (may be NULL) the grant's fencing token; LC_ERR_RESET
 * (the key or this source was reset while waiting), LC_ERR_TIMEOUT,
 * LC_ERR_CANCELED, LC_ERR_SESSION_LOST, LC_ERR_SESSION_CLOSED,
 * LC_ERR_INVALID (key not 1..127 bytes). A dropped connection does not fail
 * it: it is reissued after the resume.
 */
LC_API lc_err lc_session_lock(lc_session *s, const char *key, int timeout_ms, lc_cancel *cancel,
                              uint64_t *token);

/* TryLock: LC_OK with *token when the key was free; LC_ERR_NOT_WON when
 * anyone holds it (this session included); LC_ERR_REFUSED on '-'; or an
 * error as for lock (LC_ERR_TIMEOUT after io_timeout_ms). */
LC_API lc_err lc_session_trylock(lc_session *s, const char *key, uint64_t *token);

/* Unlock: releases the grant of key with that token (0: whichever grant this
 * session holds on key). LC_OK, or LC_ERR_NOT_HELD (nothing released, never
 * another holder's grant), LC_ERR_OUTCOME_UNKNOWN, LC_ERR_SESSION_LOST, ... */
LC_API lc_err lc_session_unlock(lc_session *s, const char *key, uint64_t token);

/* ResetByKey: drops key's holder, whoever it is, and refuses its waiters. */
LC_API lc_err lc_session_reset_key(lc_session *s, const char *key);
/* ResetBySource: refuses every waiter of source and releases every key it
 * holds; NULL or "" is this connection's IP address. The session stays open,
 * though it loses its holds if source is its own. */
LC_API lc_err lc_session_reset_source(lc_session *s, const char *source);

/*
 * Scoped form: locks key (as lc_session_lock), calls fn(arg, token), then
 * unlocks by that token whatever fn returned. fn's value goes to *fn_result
 * (may be NULL). Returns the lock's error (fn not called);
 * LC_ERR_SESSION_LOST when the session was lost while fn ran (the hold
 * ended under it: whatever fn did may have overlapped another holder, which
 * is what the token is for); else the unlock's result.
 */
typedef int (*lc_session_locked_fn)(void *arg, uint64_t token);
LC_API lc_err lc_session_with_lock(lc_session *s, const char *key, int timeout_ms,
                                   lc_cancel *cancel, lc_session_locked_fn fn, void *arg,
                                   int *fn_result);

/*
 * Ends the session and frees it: sends Close (the server refuses its pending
 * locks and releases every key it holds at once), fails every call still
 * waiting with LC_ERR_SESSION_CLOSED, joins the session's threads, waits for
 * those calls to return, and frees s. timeout_ms bounds the wait for the
 * server's answer (<= 0: 5000). Returns LC_OK when the server confirmed;
 * when it could not be told (disconnected, lost, timeout), the session is
 * freed all the same and the result says why: the server then releases the
 * holds one TTL after it last heard from the session. No call may start on s
 * once lc_session_close has begun. NULL is a no-op. Called from on_lost it
 * returns LC_ERR_INVALID and does nothing (it would join its own thread).
 */
LC_API lc_err lc_session_close(lc_session *s, int timeout_ms);

/* Session codec, exposed for tests and tools; the calls above use it. */

/* Encodes an open (resume 0: a new session). Refuses a source or auth over
 * 127 bytes (LC_ERR_INVALID). */
LC_API lc_err lc_session_encode_open(uint8_t *buf, size_t cap, size_t *len, uint8_t version,
                                     uint32_t ttl_ms, uint64_t resume, const char *source,
                                     const char *auth);
/* Decodes the 13-byte answer to an open. */
LC_API void lc_session_decode_open_answer(const uint8_t b[LC_SESSION_OPEN_ANSWER_SIZE],
                                          uint8_t *status, uint32_t *ttl_ms, uint64_t *session);
/* Encodes a request. Refuses (LC_ERR_INVALID) a key over 127 bytes, an empty
 * key for lock, unlock, reset by key and trylock, an unknown action. Cancel,
 * Ping and Close take no key (NULL or ""). */
LC_API lc_err lc_session_encode_request(uint8_t *buf, size_t cap, size_t *len, int action,
                                        uint32_t id, uint64_t token, const char *key);
/* Decodes a 13-byte answer. */
LC_API void lc_session_decode_answer(const uint8_t b[LC_SESSION_ANSWER_SIZE], uint32_t *id,
                                     uint8_t *status, uint64_t *token);

#ifdef __cplusplus
}
#endif

#endif /* LOCKINGCENTER_H */
