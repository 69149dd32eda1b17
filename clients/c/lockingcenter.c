/*
 * lockingcenter.c - C client for the Locking-Center lock server.
 * See lockingcenter.h for the API and its contract.
 */
#define _POSIX_C_SOURCE 200809L

#include "lockingcenter.h"
#include "lc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define LC_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define LC_DEFAULT_IO_TIMEOUT_MS 30000
/* How long a call that gives up reads on for an answer already under way. */
#define LC_GIVE_UP_GRACE_MS 2000

#define NO_DEADLINE LC_NO_DEADLINE

const char *lc_strerror(lc_err err) {
    switch (err) {
    case LC_OK: return "success";
    case LC_ERR_NOT_WON: return "key is held by someone else (try-lock not won)";
    case LC_ERR_RESET: return "key or source was reset while waiting";
    case LC_ERR_REFUSED: return "server refused the request";
    case LC_ERR_INVALID: return "invalid argument (nothing was sent)";
    case LC_ERR_UNREACHABLE: return "server unreachable or connection closed without an answer";
    case LC_ERR_TIMEOUT: return "timed out";
    case LC_ERR_CANCELED: return "canceled";
    case LC_ERR_PROTOCOL: return "unexpected answer from the server";
    case LC_ERR_SYSTEM: return "local system error";
    case LC_ERR_NOT_HELD: return "this session does not hold that grant (nothing released)";
    case LC_ERR_OUTCOME_UNKNOWN: return "answer lost: the request may or may not have taken effect";
    case LC_ERR_DISCONNECTED: return "session connection lost before the answer (the session is resuming)";
    case LC_ERR_SESSION_LOST: return "session lost: its holds are gone";
    case LC_ERR_SESSION_CLOSED: return "session closed";
    case LC_ERR_TLS: return "TLS failed (certificate not trusted, wrong server name, client certificate refused, or a TLS file)";
    case LC_ERR_UNSUPPORTED: return "not supported by this build (no TLS: built without OpenSSL)";
    }
    return "unknown error";
}

/* ---- address ---------------------------------------------------------- */

static bool valid_port(const char *p, size_t n) {
    if (n == 0 || n > 5) {
        return false;
    }
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
        v = v * 10 + (unsigned long)(p[i] - '0');
    }
    return v >= 1 && v <= 65535;
}

static bool copy_part(char *dst, size_t cap, const char *src, size_t n) {
    if (n == 0 || n >= cap) {
        return false;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
    return true;
}

/* Parses one address ("host:port", "host", "[v6]:port", "[v6]") of n bytes. */
static bool parse_one(lc_address *out, const char *address, size_t n) {
    const char *host = address, *port = LC_DEFAULT_PORT;
    size_t hlen, plen = strlen(LC_DEFAULT_PORT);
    const char *end = address + n;
    if (n > 0 && address[0] == '[') {
        const char *close = memchr(address, ']', n);
        if (close == NULL) return false;
        host = address + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < end && close[1] == ':') {
            port = close + 2;
            plen = (size_t)(end - port);
        } else if (close + 1 != end) {
            return false;
        }
    } else {
        const char *colon = memchr(address, ':', n);
        if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) == NULL) {
            hlen = (size_t)(colon - address);
            port = colon + 1;
            plen = (size_t)(end - port);
        } else {
            hlen = n; /* no port, or a bare IPv6 address */
        }
    }
    return copy_part(out->host, sizeof out->host, host, hlen) && valid_port(port, plen) &&
           copy_part(out->port, sizeof out->port, port, plen);
}

lc_err lc_client_init(lc_client *c, const char *address, const char *source) {
    if (c == NULL) {
        return LC_ERR_INVALID;
    }
    memset(c, 0, sizeof *c);
    c->connect_timeout_ms = LC_DEFAULT_CONNECT_TIMEOUT_MS;
    c->io_timeout_ms = LC_DEFAULT_IO_TIMEOUT_MS;

    if (source == NULL) {
        source = "";
    }
    size_t slen = strlen(source);
    if (slen > LC_MAX_NAME) {
        return LC_ERR_INVALID;
    }
    memcpy(c->source, source, slen + 1);

    if (address == NULL || address[0] == '\0') {
        address = "localhost";
    }
    /* A comma-separated list; spaces around each element are ignored. */
    for (const char *p = address;;) {
        while (*p == ' ') p++;
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *last = end;
        while (last > p && last[-1] == ' ') last--;
        if (c->naddrs == LC_MAX_ADDRESSES || !parse_one(&c->addrs[c->naddrs], p, (size_t)(last - p))) {
            memset(c->addrs, 0, sizeof c->addrs);
            c->naddrs = 0;
            return LC_ERR_INVALID;
        }
        c->naddrs++;
        if (comma == NULL) break;
        p = comma + 1;
    }
    memcpy(c->host, c->addrs[0].host, sizeof c->host);
    memcpy(c->port, c->addrs[0].port, sizeof c->port);
    return LC_OK;
}

/* ---- cancel token ------------------------------------------------------ */

int lc__set_flags(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        return -1;
    }
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0) {
        return -1;
    }
    return 0;
}

lc_err lc_cancel_init(lc_cancel *t) {
    if (t == NULL) {
        return LC_ERR_INVALID;
    }
    t->fds[0] = t->fds[1] = -1;
    if (pipe(t->fds) != 0) {
        t->fds[0] = t->fds[1] = -1;
        return LC_ERR_SYSTEM;
    }
    if (lc__set_flags(t->fds[0]) != 0 || lc__set_flags(t->fds[1]) != 0) {
        int saved = errno;
        lc_cancel_destroy(t);
        errno = saved;
        return LC_ERR_SYSTEM;
    }
    return LC_OK;
}

void lc_cancel_trigger(lc_cancel *t) {
    if (t == NULL || t->fds[1] < 0) {
        return;
    }
    int saved = errno;
    /* A full pipe (EAGAIN) means it is already triggered. */
    ssize_t n = write(t->fds[1], "x", 1);
    (void)n;
    errno = saved;
}

bool lc_cancel_triggered(const lc_cancel *t) {
    if (t == NULL || t->fds[0] < 0) {
        return false;
    }
    struct pollfd p = {.fd = t->fds[0], .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

void lc_cancel_reset(lc_cancel *t) {
    if (t == NULL || t->fds[0] < 0) {
        return;
    }
    char buf[64];
    while (read(t->fds[0], buf, sizeof buf) > 0) {
    }
}

void lc_cancel_destroy(lc_cancel *t) {
    if (t == NULL) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (t->fds[i] >= 0) {
            close(t->fds[i]);
            t->fds[i] = -1;
        }
    }
}

/* ---- frame ------------------------------------------------------------- */

lc_err lc_encode(uint8_t *buf, size_t cap, size_t *len, int action, const char *key,
                 const char *source) {
    if (buf == NULL || len == NULL || action < LC_ACTION_LOCK || action > LC_ACTION_TRYLOCK) {
        return LC_ERR_INVALID;
    }
    if (key == NULL) {
        key = "";
    }
    if (source == NULL) {
        source = "";
    }
    size_t klen = strlen(key), slen = strlen(source);
    if (klen > LC_MAX_NAME || slen > LC_MAX_NAME) {
        return LC_ERR_INVALID;
    }
    if (klen == 0 && action != LC_ACTION_RESET_BY_SOURCE) {
        return LC_ERR_INVALID;
    }
    size_t n = 3 + klen + slen;
    if (cap < n) {
        return LC_ERR_INVALID;
    }
    buf[0] = (uint8_t)action;
    buf[1] = (uint8_t)klen;
    memcpy(buf + 2, key, klen);
    buf[2 + klen] = (uint8_t)slen;
    memcpy(buf + 3 + klen, source, slen);
    *len = n;
    return LC_OK;
}

/* ---- time and poll ----------------------------------------------------- */

int64_t lc__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t deadline_after(int timeout_ms) {
    /* + 1: the clock is in whole milliseconds, and a timeout never fires early. */
    return timeout_ms > 0 ? lc__now_ms() + timeout_ms + 1 : NO_DEADLINE;
}

/*
 * Waits until fd has events, the deadline passes or the token triggers.
 * Returns LC_OK (fd ready), LC_ERR_TIMEOUT, LC_ERR_CANCELED or LC_ERR_SYSTEM.
 */
lc_err lc__wait_fd(int fd, short events, int64_t deadline, const lc_cancel *cancel) {
    for (;;) {
        int wait = -1;
        if (deadline != NO_DEADLINE) {
            int64_t left = deadline - lc__now_ms();
            if (left <= 0) {
                return LC_ERR_TIMEOUT;
            }
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = -1}};
        nfds_t n = 1;
        if (cancel != NULL && cancel->fds[0] >= 0) {
            p[1].fd = cancel->fds[0];
            p[1].events = POLLIN;
            n = 2;
        }
        int r = poll(p, n, wait);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            return LC_ERR_SYSTEM;
        }
        if (r == 0) {
            continue; /* loop re-checks the deadline */
        }
        if (p[0].revents != 0) {
            return LC_OK;
        }
        if (n == 2 && p[1].revents != 0) {
            return LC_ERR_CANCELED;
        }
    }
}

/*
 * Reads the one-byte answer before deadline (unless cancel triggers).
 * Returns LC_OK with *answer set; the wait's error (LC_ERR_TIMEOUT,
 * LC_ERR_CANCELED, LC_ERR_SYSTEM); LC_ERR_UNREACHABLE at EOF (errno
 * ECONNRESET) or on a read error; LC_ERR_TLS. Does not close k.
 */
static lc_err read_answer(lc_conn *k, int64_t deadline, const lc_cancel *cancel, uint8_t *answer) {
    size_t got = 0;
    return lc__conn_recv(k, answer, 1, &got, deadline, cancel);
}

/*
 * Hangs up on a request whose frame was sent, for reason why (timeout,
 * cancel). Closing outright would discard a '+' the server sent just before
 * it noticed the hang-up, leaving the key held by nobody. So: close the
 * write side (TCP FIN, or TLS close_notify: the server reads EOF, withdraws
 * the waiter and closes), then read until that close, for at most
 * LC_GIVE_UP_GRACE_MS. An answer that arrives meanwhile is the call's answer
 * (LC_OK with *answer set); else why (grace over, or EOF / an error: the
 * server withdrew the waiter). errno is kept.
 */
static lc_err give_up(lc_conn *k, lc_err why, uint8_t *answer) {
    int saved = errno;
    lc__conn_hangup(k);
    /* No cancel token here: it stays triggered. */
    lc_err e = read_answer(k, lc__now_ms() + LC_GIVE_UP_GRACE_MS, NULL, answer);
    lc__conn_close(k);
    errno = saved;
    return e == LC_OK ? LC_OK : why;
}

/*
 * One request: connect (any of the client's addresses), write the frame,
 * read one byte, close. timeout_ms bounds the whole call (0: no limit). On
 * timeout or cancel the client hangs up (give_up), which withdraws a waiting
 * lock on the server.
 */
static lc_err roundtrip(const lc_client *c, const uint8_t *frame, size_t len, int timeout_ms,
                        const lc_cancel *cancel, uint8_t *answer) {
    if (c == NULL || c->naddrs == 0 || c->naddrs > LC_MAX_ADDRESSES) {
        return LC_ERR_INVALID;
    }
    if (cancel != NULL && lc_cancel_triggered(cancel)) {
        return LC_ERR_CANCELED;
    }
    int64_t deadline = deadline_after(timeout_ms);
    lc_conn k;
    lc_err e = lc__dial(c, deadline, cancel, &k);
    if (e != LC_OK) {
        return e;
    }
    e = lc__conn_send(&k, frame, len, deadline, cancel);
    if (e != LC_OK) {
        lc__conn_close(&k);
        return e;
    }
    e = read_answer(&k, deadline, cancel, answer);
    if (e == LC_OK) {
        lc__conn_close(&k);
        return LC_OK;
    }
    if (e == LC_ERR_UNREACHABLE || e == LC_ERR_TLS) {
        lc__conn_close(&k);
        return e;
    }
    /* Timeout, cancel or a failed wait: a granted key must not be reported
     * as not granted. */
    return give_up(&k, e, answer);
}

/* lc_encode refuses a NULL or bad key, roundtrip a NULL client. */
static lc_err request(const lc_client *c, int action, const char *key, const char *source,
                      int timeout_ms, const lc_cancel *cancel, uint8_t *answer) {
    uint8_t frame[LC_MAX_FRAME];
    size_t len = 0;
    lc_err e = lc_encode(frame, sizeof frame, &len, action, key, source);
    if (e != LC_OK) {
        return e;
    }
    return roundtrip(c, frame, len, timeout_ms, cancel, answer);
}

/* ---- actions ----------------------------------------------------------- */

/* The result of an answer that is '+' or '-' (on_minus); any other byte is a
 * protocol error. */
static lc_err plus_or_minus(uint8_t answer, lc_err on_minus) {
    switch (answer) {
    case '+': return LC_OK;
    case '-': return on_minus;
    default: return LC_ERR_PROTOCOL;
    }
}

lc_err lc_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel) {
    uint8_t a = 0;
    lc_err e = request(c, LC_ACTION_LOCK, key, c ? c->source : NULL, timeout_ms, cancel, &a);
    return e != LC_OK ? e : plus_or_minus(a, LC_ERR_RESET);
}

lc_err lc_trylock(const lc_client *c, const char *key, bool *won) {
    uint8_t a = 0;
    if (won == NULL) {
        return LC_ERR_INVALID;
    }
    *won = false;
    lc_err e = request(c, LC_ACTION_TRYLOCK, key, c ? c->source : NULL,
                       c ? c->io_timeout_ms : 0, NULL, &a);
    if (e != LC_OK) {
        return e;
    }
    switch (a) {
    case '+': *won = true; return LC_OK;
    case '#': return LC_OK;
    case '-': return LC_ERR_REFUSED;
    default: return LC_ERR_PROTOCOL;
    }
}

static lc_err simple(const lc_client *c, int action, const char *key, const char *source) {
    uint8_t a = 0;
    lc_err e = request(c, action, key, source, c ? c->io_timeout_ms : 0, NULL, &a);
    return e != LC_OK ? e : plus_or_minus(a, LC_ERR_REFUSED);
}

lc_err lc_unlock(const lc_client *c, const char *key) {
    return simple(c, LC_ACTION_UNLOCK, key, c ? c->source : NULL);
}

lc_err lc_wait(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel) {
    lc_err e = lc_lock(c, key, timeout_ms, cancel);
    if (e != LC_OK) {
        return e;
    }
    e = lc_unlock(c, key);
    /* '-' here means someone reset the key after our turn came: our turn
     * still came, which is all a wait promises. */
    return e == LC_ERR_REFUSED ? LC_OK : e;
}

lc_err lc_reset_key(const lc_client *c, const char *key) {
    return simple(c, LC_ACTION_RESET_BY_KEY, key, "");
}

lc_err lc_reset_source(const lc_client *c, const char *source) {
    if (c == NULL) {
        return LC_ERR_INVALID;
    }
    return simple(c, LC_ACTION_RESET_BY_SOURCE, "", source ? source : c->source);
}

/* The body of the scoped forms once the key is held: fn, then unlock. */
static lc_err run_and_unlock(const lc_client *c, const char *key, lc_locked_fn fn, void *arg,
                             int *fn_result) {
    int r = fn(arg);
    if (fn_result != NULL) {
        *fn_result = r;
    }
    return lc_unlock(c, key);
}

lc_err lc_with_lock(const lc_client *c, const char *key, int timeout_ms, lc_cancel *cancel,
                    lc_locked_fn fn, void *arg, int *fn_result) {
    if (fn == NULL) {
        return LC_ERR_INVALID;
    }
    lc_err e = lc_lock(c, key, timeout_ms, cancel);
    if (e != LC_OK) {
        return e;
    }
    return run_and_unlock(c, key, fn, arg, fn_result);
}

lc_err lc_with_trylock(const lc_client *c, const char *key, lc_locked_fn fn, void *arg,
                       int *fn_result) {
    bool won = false;
    if (fn == NULL) {
        return LC_ERR_INVALID;
    }
    lc_err e = lc_trylock(c, key, &won);
    if (e != LC_OK) {
        return e;
    }
    if (!won) {
        return LC_ERR_NOT_WON;
    }
    return run_and_unlock(c, key, fn, arg, fn_result);
}
