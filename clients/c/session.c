/*
 * session.c - sessions of the Locking-Center C client (docs/protocol.md,
 * "Sessions"). See lockingcenter.h for the API and the threading model.
 *
 * Inside: one mutex (lc_session.mu) guards the whole state. A request is an
 * lc_call that lives in exactly one place at a time: the queue (not yet
 * written), a pending slot (written, answer not read), or parked (a grant
 * that crossed a Cancel, waiting for the session's own Unlock of it). It
 * ends in complete(). A call made by a program thread is freed by that
 * thread once it has its outcome, or by the session when the thread has
 * already left (it gave up waiting); the session's own calls (Ping, Cancel,
 * stray unlocks) are freed by complete().
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* TCP_KEEPIDLE, TCP_KEEPINTVL */

#include "lc_internal.h"
#include "lockingcenter.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef MSG_NOSIGNAL
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

/* The server drops a connection with more than this many requests awaiting
 * an answer (Cancel is never pending). One place is kept for a Ping. */
#define MAX_PENDING 1024
/* Resume back-off: first wait, and its bound. */
#define MIN_BACKOFF_MS 50
#define MAX_BACKOFF_MS 1000
/* Rounds over the addresses lc_session_open makes before it gives up. */
#define OPEN_ROUNDS 3
/* How long a lock that gave up waits for its one answer after Cancel. */
#define CANCEL_GRACE_MS 2000
/* Default close wait for the server's '+'. */
#define CLOSE_TIMEOUT_MS 5000
/* Buckets of the table of holds (key -> token). */
#define HELD_BUCKETS 64
/* Buckets of the set of reserved request ids. */
#define ID_BUCKETS 256
/* Bytes the writer gathers into one write. */
#define WRITE_BUF 16384

typedef struct lc_call lc_call;

struct lc_call {
    int action;
    uint32_t id;    /* given when first written; kept by a reissue */
    uint64_t token; /* request token (Unlock); for a Cancel, the id it names */
    char key[LC_MAX_NAME + 1];

    /* Everything below is guarded by the session's mu. */
    bool sent;
    int64_t sent_at;
    bool internal; /* the session's own: no thread waits for it */
    bool caller;   /* a program thread waits for it, or will read its outcome */
    bool dropped;  /* given up before it was written: the writer skips and frees it */
    bool gave_up;  /* the caller stopped waiting after it was written */
    /* A Lock or TryLock written on a connection lost before its answer:
     * queued again, to be sent with the same id after the resume. */
    bool reissue;
    bool done;
    uint8_t status;
    uint64_t answer_token;
    lc_err err;
    /* A stray unlock of a grant that crossed a Cancel: completes owner. */
    lc_call *owner;
    pthread_cond_t cv;
    int wake[2]; /* a pipe when the caller also waits for an lc_cancel */
    lc_call *next;  /* in the queue */
    lc_call *snext; /* in its pending bucket */
};

typedef struct held {
    char key[LC_MAX_NAME + 1];
    uint64_t token;
    uint32_t id; /* of the request that made the grant: reserved while held */
    struct held *next;
} held;

typedef struct idnode {
    uint32_t id;
    struct idnode *next;
} idnode;

typedef struct stray {
    char key[LC_MAX_NAME + 1];
    uint64_t token; /* 0: unknown (a lost Lock) */
} stray;

struct lc_session {
    /* Set at open, then read-only. */
    lc_client addr;
    char source[LC_MAX_NAME + 1];
    char auth[LC_MAX_NAME + 1];
    uint32_t ttl_asked;
    int io_timeout_ms;
    lc_session_lost_fn on_lost;
    void *on_lost_arg;
    uint64_t id;
    uint32_t ttl_ms;
    /* Triggered by lc_session_close: interrupts a connect during a resume. */
    lc_cancel stop;
    /* The order of addresses: used by lc_session_open, then only by the
     * supervisor thread (open_conn runs without mu). */
    uint64_t rng_dial;
    pthread_t supervisor;

    pthread_mutex_t mu; /* guards every field below */
    /* wake: the supervisor has work (queue, broken connection, end). */
    pthread_cond_t wake;
    /* changed: the session ended, or a call returned while closing. */
    pthread_cond_t changed;
    lc_conn conn; /* the connection; conn.fd -1 between connections */
    bool broken;
    bool reader_running;
    pthread_t reader;
    lc_call *qhead, *qtail;
    lc_call *slots[MAX_PENDING]; /* pending calls, chained by id % MAX_PENDING */
    size_t npending;
    idnode *reserved[ID_BUCKETS]; /* ids no new request may take */
    uint32_t next_id;
    held *held[HELD_BUCKETS];
    stray *strays;
    size_t nstrays, capstrays;
    int64_t confirmed; /* send time of the latest request answered */
    int64_t last_sent;
    lc_call *ping;
    bool closing;
    bool close_ok;
    bool ended;
    lc_err err; /* why it ended */
    /* The end has been told: on_lost has returned (or there is none to
     * call); lc_session_wait_end waits for this too. */
    bool reported;
    int callers; /* program calls in progress */
    uint64_t rng;
};

/* ---- codec ------------------------------------------------------------- */

static void put32(uint8_t *b, uint32_t v) {
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

static void put64(uint8_t *b, uint64_t v) {
    put32(b, (uint32_t)(v >> 32));
    put32(b + 4, (uint32_t)v);
}

static uint32_t get32(const uint8_t *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static uint64_t get64(const uint8_t *b) { return (uint64_t)get32(b) << 32 | get32(b + 4); }

lc_err lc_session_encode_open(uint8_t *buf, size_t cap, size_t *len, uint8_t version,
                              uint32_t ttl_ms, uint64_t resume, const char *source,
                              const char *auth) {
    if (buf == NULL || len == NULL) {
        return LC_ERR_INVALID;
    }
    size_t slen = source ? strlen(source) : 0, alen = auth ? strlen(auth) : 0;
    if (slen > LC_MAX_NAME || alen > LC_MAX_NAME || cap < 16 + slen + alen) {
        return LC_ERR_INVALID;
    }
    buf[0] = LC_ACTION_OPEN;
    buf[1] = version;
    put32(buf + 2, ttl_ms);
    put64(buf + 6, resume);
    buf[14] = (uint8_t)slen;
    if (slen) memcpy(buf + 15, source, slen);
    buf[15 + slen] = (uint8_t)alen;
    if (alen) memcpy(buf + 16 + slen, auth, alen);
    *len = 16 + slen + alen;
    return LC_OK;
}

void lc_session_decode_open_answer(const uint8_t b[LC_SESSION_OPEN_ANSWER_SIZE], uint8_t *status,
                                   uint32_t *ttl_ms, uint64_t *session) {
    *status = b[0];
    *ttl_ms = get32(b + 1);
    *session = get64(b + 5);
}

lc_err lc_session_encode_request(uint8_t *buf, size_t cap, size_t *len, int action, uint32_t id,
                                 uint64_t token, const char *key) {
    if (buf == NULL || len == NULL || action < LC_ACTION_LOCK || action > LC_ACTION_CLOSE) {
        return LC_ERR_INVALID;
    }
    size_t klen = key ? strlen(key) : 0;
    if (action >= LC_ACTION_CANCEL) {
        klen = 0; /* Cancel, Ping and Close carry no key */
    }
    if (klen > LC_MAX_NAME || cap < 14 + klen) {
        return LC_ERR_INVALID;
    }
    if (klen == 0 && action != LC_ACTION_RESET_BY_SOURCE && action < LC_ACTION_CANCEL) {
        return LC_ERR_INVALID;
    }
    buf[0] = (uint8_t)action;
    put32(buf + 1, id);
    put64(buf + 5, token);
    buf[13] = (uint8_t)klen;
    if (klen) memcpy(buf + 14, key, klen);
    *len = 14 + klen;
    return LC_OK;
}

void lc_session_decode_answer(const uint8_t b[LC_SESSION_ANSWER_SIZE], uint32_t *id,
                              uint8_t *status, uint64_t *token) {
    *id = get32(b);
    *status = b[4];
    *token = get64(b + 5);
}

/* ---- small helpers ----------------------------------------------------- */

static void abs_time(int64_t deadline_ms, struct timespec *ts) {
    ts->tv_sec = (time_t)(deadline_ms / 1000);
    ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

/* Waits on cv (monotonic clock) until deadline_ms (LC_NO_DEADLINE: none). */
static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms) {
    if (deadline_ms == LC_NO_DEADLINE) {
        pthread_cond_wait(cv, mu);
        return;
    }
    struct timespec ts;
    abs_time(deadline_ms, &ts);
    pthread_cond_timedwait(cv, mu, &ts);
}

static int init_cond(pthread_cond_t *cv) {
    pthread_condattr_t a;
    if (pthread_condattr_init(&a) != 0) return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc == 0 ? 0 : -1;
}

static bool valid_key(const char *key) {
    if (key == NULL) return false;
    size_t n = strlen(key);
    return n >= 1 && n <= LC_MAX_NAME;
}

static uint64_t next_rand(lc_session *s) { return lc__rand_next(&s->rng); }

/* ---- calls ------------------------------------------------------------- */

static lc_call *new_call(int action, const char *key, uint64_t token, bool internal) {
    lc_call *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    if (init_cond(&c->cv) != 0) {
        free(c);
        return NULL;
    }
    c->action = action;
    c->token = token;
    c->internal = internal;
    c->caller = !internal;
    c->wake[0] = c->wake[1] = -1;
    if (key) {
        size_t n = strlen(key);
        memcpy(c->key, key, n + 1);
    }
    return c;
}

static void free_call(lc_call *c) {
    pthread_cond_destroy(&c->cv);
    for (int i = 0; i < 2; i++) {
        if (c->wake[i] >= 0) close(c->wake[i]);
    }
    free(c);
}

static void enqueue(lc_session *s, lc_call *c) {
    c->next = NULL;
    if (s->qtail) s->qtail->next = c;
    else s->qhead = c;
    s->qtail = c;
    pthread_cond_signal(&s->wake);
}

static void push_front(lc_session *s, lc_call *c) {
    c->next = s->qhead;
    s->qhead = c;
    if (s->qtail == NULL) s->qtail = c;
}

/* ---- pending requests and reserved ids (mu held) ----------------------- */

static lc_call *pending_find(lc_session *s, uint32_t id) {
    for (lc_call *c = s->slots[id % MAX_PENDING]; c; c = c->snext) {
        if (c->id == id) return c;
    }
    return NULL;
}

static void pending_add(lc_session *s, lc_call *c) {
    lc_call **b = &s->slots[c->id % MAX_PENDING];
    c->snext = *b;
    *b = c;
    s->npending++;
}

static void pending_remove(lc_session *s, lc_call *c) {
    for (lc_call **p = &s->slots[c->id % MAX_PENDING]; *p; p = &(*p)->snext) {
        if (*p == c) {
            *p = c->snext;
            c->snext = NULL;
            s->npending--;
            return;
        }
    }
}

/* Takes every pending call out of the table, chained through snext. */
static lc_call *pending_take_all(lc_session *s) {
    lc_call *all = NULL;
    for (size_t i = 0; i < MAX_PENDING; i++) {
        while (s->slots[i]) {
            lc_call *c = s->slots[i];
            s->slots[i] = c->snext;
            c->snext = all;
            all = c;
        }
    }
    s->npending = 0;
    return all;
}

/* Reserves id: no new request may take it. A grant the program holds was
 * made by it (Reissue finds a grant by its request's id), or a queued
 * reissue carries it. Allocation failure loses only the reservation: the
 * server then answers a reused id '-' at worst for the grant's reissue. */
static void reserve(lc_session *s, uint32_t id) {
    idnode *n = malloc(sizeof *n);
    if (n == NULL) return;
    n->id = id;
    n->next = s->reserved[id % ID_BUCKETS];
    s->reserved[id % ID_BUCKETS] = n;
}

static void unreserve(lc_session *s, uint32_t id) {
    for (idnode **p = &s->reserved[id % ID_BUCKETS]; *p; p = &(*p)->next) {
        if ((*p)->id == id) {
            idnode *n = *p;
            *p = n->next;
            free(n);
            return;
        }
    }
}

static bool id_reserved(lc_session *s, uint32_t id) {
    for (idnode *n = s->reserved[id % ID_BUCKETS]; n; n = n->next) {
        if (n->id == id) return true;
    }
    return false;
}

static void reserved_clear(lc_session *s) {
    for (size_t i = 0; i < ID_BUCKETS; i++) {
        while (s->reserved[i]) {
            idnode *n = s->reserved[i];
            s->reserved[i] = n->next;
            free(n);
        }
    }
}

/* ---- holds and strays (mu held) ---------------------------------------- */

static size_t bucket(const char *key) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 16777619u;
    return h % HELD_BUCKETS;
}

static held **held_find(lc_session *s, const char *key) {
    held **p = &s->held[bucket(key)];
    while (*p && strcmp((*p)->key, key) != 0) p = &(*p)->next;
    return p;
}

static void held_put(lc_session *s, const char *key, uint64_t token, uint32_t id) {
    held **p = held_find(s, key);
    if (*p) {
        unreserve(s, (*p)->id);
        (*p)->token = token;
        (*p)->id = id;
        reserve(s, id);
        return;
    }
    held *h = calloc(1, sizeof *h);
    if (h == NULL) return; /* only the stray cleanup's skip is lost */
    strcpy(h->key, key);
    h->token = token;
    h->id = id;
    reserve(s, id);
    *p = h;
}

/* Forgets key's hold when token names it (or is 0). */
static void held_drop(lc_session *s, const char *key, uint64_t token) {
    held **p = held_find(s, key);
    if (*p && (token == 0 || (*p)->token == token)) {
        held *h = *p;
        *p = h->next;
        unreserve(s, h->id);
        free(h);
    }
}

static void held_clear(lc_session *s) {
    for (size_t i = 0; i < HELD_BUCKETS; i++) {
        while (s->held[i]) {
            held *h = s->held[i];
            s->held[i] = h->next;
            free(h);
        }
    }
    reserved_clear(s);
}

static void stray_add(lc_session *s, const char *key, uint64_t token) {
    if (s->nstrays == s->capstrays) {
        size_t cap = s->capstrays ? 2 * s->capstrays : 8;
        stray *n = realloc(s->strays, cap * sizeof *n);
        if (n == NULL) return; /* that grant ends with the session's TTL */
        s->strays = n;
        s->capstrays = cap;
    }
    stray *st = &s->strays[s->nstrays++];
    strcpy(st->key, key);
    st->token = token;
}

/* ---- outcomes (mu held) ------------------------------------------------ */

/* Hands c its outcome, once, and frees it when nobody waits for it. */
static void complete(lc_session *s, lc_call *c, uint8_t status, uint64_t token, lc_err err) {
    if (c->done) return;
    c->done = true;
    c->status = status;
    c->answer_token = token;
    c->err = err;
    if (c->owner) {
        /* The stray unlock of a crossed grant: the lock that gave up is
         * settled now (the grant released, or left to the next resume). */
        complete(s, c->owner, '-', 0, LC_OK);
        c->owner = NULL;
    }
    if (c == s->ping) s->ping = NULL;
    if (c->internal || !c->caller) {
        free_call(c);
        return;
    }
    pthread_cond_signal(&c->cv);
    if (c->wake[1] >= 0) {
        ssize_t n = write(c->wake[1], "x", 1);
        (void)n; /* a full pipe is already readable */
    }
}

/* The session's own Unlock of a grant no caller owns. */
static lc_call *stray_unlock(const char *key, uint64_t token, lc_call *owner) {
    lc_call *u = new_call(LC_ACTION_UNLOCK, key, token, true);
    if (u) u->owner = owner;
    return u;
}

/* An answer read from the connection. */
static void deliver(lc_session *s, uint32_t id, uint8_t status, uint64_t token) {
    lc_call *c = pending_find(s, id);
    if (c == NULL) return; /* no pending request: ignored */
    if (s->npending >= MAX_PENDING - 1 && s->qhead) pthread_cond_signal(&s->wake);
    pending_remove(s, c);
    if (c->sent_at > s->confirmed) s->confirmed = c->sent_at;
    if ((c->action == LC_ACTION_LOCK || c->action == LC_ACTION_TRYLOCK) && status == '+') {
        if (c->gave_up) {
            /* The grant crossed the Cancel (or the caller's timeout): nobody
             * owns it, so it goes back at once, by its token. */
            lc_call *u = stray_unlock(c->key, token, c);
            if (u) {
                enqueue(s, u);
                return; /* c is parked until u's answer */
            }
            stray_add(s, c->key, token);
        } else {
            held_put(s, c->key, token, c->id);
        }
    }
    if (c->action == LC_ACTION_CLOSE && status == '+') s->close_ok = true;
    complete(s, c, status, token, LC_OK);
}

/* The connection is gone. Locks and TryLocks a program thread still waits
 * for are queued again, first and in the order they were sent, to be
 * reissued with their ids after the resume (the server answers a grant it
 * made for one at once); the rest fail. A Lock given up on may have been
 * granted: it becomes a stray, settled after the resume. */
static void disconnected(lc_session *s) {
    lc_call *reissue = NULL; /* sorted by sent_at, chained through next */
    lc_call *all = pending_take_all(s);
    while (all) {
        lc_call *c = all;
        all = c->snext;
        c->snext = NULL;
        switch (c->action) {
        case LC_ACTION_LOCK:
        case LC_ACTION_TRYLOCK:
            if (!c->internal && !c->gave_up) {
                c->sent = false;
                c->reissue = true;
                reserve(s, c->id);
                lc_call **p = &reissue;
                while (*p && (*p)->sent_at <= c->sent_at) p = &(*p)->next;
                c->next = *p;
                *p = c;
                break;
            }
            stray_add(s, c->key, 0);
            complete(s, c, 0, 0, LC_ERR_DISCONNECTED);
            break;
        case LC_ACTION_UNLOCK:
            /* Resent by token after the resume (never with token 0, which
             * could release a later grant); a lost stray unlock is retried
             * by the next cleanup. */
            if (c->internal || c->token != 0) stray_add(s, c->key, c->token);
            complete(s, c, 0, 0, LC_ERR_OUTCOME_UNKNOWN);
            break;
        case LC_ACTION_RESET_BY_KEY:
        case LC_ACTION_RESET_BY_SOURCE:
            complete(s, c, 0, 0, LC_ERR_OUTCOME_UNKNOWN);
            break;
        default:
            complete(s, c, 0, 0, LC_ERR_DISCONNECTED);
        }
    }
    /* Queued Cancels name locks of the lost connection; a queued Ping is
     * of no use to the next one. */
    lc_call **p = &s->qhead;
    s->qtail = NULL;
    while (*p) {
        lc_call *c = *p;
        if (c->action == LC_ACTION_CANCEL || c->action == LC_ACTION_PING) {
            *p = c->next;
            complete(s, c, 0, 0, LC_ERR_DISCONNECTED);
            continue;
        }
        s->qtail = c;
        p = &c->next;
    }
    s->ping = NULL;
    if (reissue) {
        lc_call *last = reissue;
        while (last->next) last = last->next;
        last->next = s->qhead;
        s->qhead = reissue;
        if (s->qtail == NULL) s->qtail = last;
    }
}

/* A resume succeeded: the unlocks of the strays go first, so that they reach
 * the server before any new request (a new Lock of the same key must not be
 * released by them). */
static void resumed(lc_session *s, int64_t sent_at) {
    s->confirmed = s->last_sent = sent_at;
    for (size_t i = s->nstrays; i-- > 0;) {
        stray *st = &s->strays[i];
        held *h = *held_find(s, st->key);
        if (h && (st->token == 0 || st->token == h->token)) {
            continue; /* the program holds it through this session: no stray can */
        }
        bool dup = false;
        for (size_t j = 0; j < i && st->token == 0; j++) {
            dup = dup || (s->strays[j].token == 0 && strcmp(s->strays[j].key, st->key) == 0);
        }
        if (dup) continue;
        lc_call *u = stray_unlock(st->key, st->token, NULL);
        if (u) push_front(s, u);
    }
    s->nstrays = 0;
}

/* Ends the session with err, once: every call fails; the threads stop. */
static bool finish(lc_session *s, lc_err err) {
    if (s->ended) return false;
    s->ended = true;
    s->err = err;
    s->reported = !(err == LC_ERR_SESSION_LOST && s->on_lost != NULL);
    lc__conn_interrupt(&s->conn); /* a blocked read or write ends now */
    lc_call *all = pending_take_all(s);
    while (all) {
        lc_call *c = all;
        all = c->snext;
        c->snext = NULL;
        complete(s, c, 0, 0, err);
    }
    while (s->qhead) {
        lc_call *c = s->qhead;
        s->qhead = c->next;
        if (c->dropped) free_call(c);
        else complete(s, c, 0, 0, err);
    }
    s->qtail = NULL;
    s->nstrays = 0;
    held_clear(s);
    pthread_cond_broadcast(&s->wake);
    pthread_cond_broadcast(&s->changed);
    return true;
}

/* ---- connection -------------------------------------------------------- */

static void tune_session_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#if defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL)
    int idle = 15;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
#endif
}

/*
 * Sends an open (resume 0: a new session) on the connection to address
 * which, and reads the answer, before deadline. LC_OK with *k, the answer
 * and the send time; LC_ERR_REFUSED when the server answered '-'; else why
 * this address did not answer (LC_ERR_UNREACHABLE, LC_ERR_TLS,
 * LC_ERR_TIMEOUT: deadline, LC_ERR_CANCELED, LC_ERR_PROTOCOL).
 */
static lc_err open_at(lc_session *s, size_t which, uint64_t resume, int64_t deadline,
                      lc_conn *k, uint32_t *ttl_ms, uint64_t *id, int64_t *sent_at) {
    uint8_t frame[LC_SESSION_OPEN_MAX];
    size_t len = 0;
    lc_err e = lc_session_encode_open(frame, sizeof frame, &len, 1, s->ttl_asked, resume,
                                      s->source, s->auth);
    if (e != LC_OK) return e;
    /* One attempt: the connect, the handshake and the answer within the
     * connect timeout (a node with no leader holds a connection up to its
     * LEADER_WAIT, then closes it: the next address is tried). */
    int64_t until = lc__now_ms() + s->addr.connect_timeout_ms;
    bool call_first = deadline < until;
    if (call_first) until = deadline;
    e = lc__connect_address(&s->addr, which, until, &s->stop, &s->rng_dial, k);
    if (e != LC_OK) return e == LC_ERR_TIMEOUT && !call_first ? LC_ERR_UNREACHABLE : e;
    *sent_at = lc__now_ms();
    e = lc__conn_send(k, frame, len, until, &s->stop);
    uint8_t ans[LC_SESSION_OPEN_ANSWER_SIZE];
    size_t got = 0;
    while (e == LC_OK && got < sizeof ans) {
        size_t n = 0;
        e = lc__conn_recv(k, ans + got, sizeof ans - got, &n, until, &s->stop);
        got += n;
    }
    if (got >= 1 && ans[0] == '-') {
        /* Refused; a server without sessions answers one '-' and closes. */
        lc__conn_close(k);
        return LC_ERR_REFUSED;
    }
    if (e != LC_OK) {
        lc__conn_close(k);
        return e == LC_ERR_TIMEOUT && !call_first ? LC_ERR_UNREACHABLE : e;
    }
    uint8_t status;
    lc_session_decode_open_answer(ans, &status, ttl_ms, id);
    if (status != '+' || *ttl_ms == 0 || *id == 0 || (resume != 0 && *id != resume)) {
        lc__conn_close(k);
        return LC_ERR_PROTOCOL;
    }
    tune_session_socket(k->fd);
    return LC_OK;
}

/*
 * One round over every address, in random order, until one answers the
 * open. LC_OK with *k; LC_ERR_REFUSED (an answer '-': the server's word,
 * not retried elsewhere); LC_ERR_TIMEOUT (deadline) or LC_ERR_CANCELED;
 * else LC_ERR_TLS when an address failed so, LC_ERR_UNREACHABLE.
 */
static lc_err open_conn(lc_session *s, uint64_t resume, int64_t deadline, lc_conn *k,
                        uint32_t *ttl_ms, uint64_t *id, int64_t *sent_at) {
    size_t order[LC_MAX_ADDRESSES];
    lc__shuffle(order, s->addr.naddrs, &s->rng_dial);
    lc_err result = LC_ERR_UNREACHABLE;
    for (size_t i = 0; i < s->addr.naddrs; i++) {
        lc_err e = open_at(s, order[i], resume, deadline, k, ttl_ms, id, sent_at);
        switch (e) {
        case LC_OK:
        case LC_ERR_REFUSED:
        case LC_ERR_TIMEOUT:
        case LC_ERR_CANCELED:
        case LC_ERR_SYSTEM:
        case LC_ERR_INVALID:
            return e;
        case LC_ERR_TLS:
            result = e;
            break;
        default:
            break;
        }
    }
    return result;
}

/* The reader of one connection: matches answers to calls by id until the
 * connection fails or is shut down. */
static void *reader_main(void *arg) {
    lc_session *s = arg;
    lc_conn *k = &s->conn; /* replaced only after this thread is joined */
    uint8_t buf[64 * LC_SESSION_ANSWER_SIZE];
    size_t have = 0;
    for (;;) {
        size_t n = 0;
        if (lc__conn_recv(k, buf + have, sizeof buf - have, &n, LC_NO_DEADLINE, NULL) != LC_OK) break;
        have += n;
        size_t off = 0;
        pthread_mutex_lock(&s->mu);
        for (; have - off >= LC_SESSION_ANSWER_SIZE; off += LC_SESSION_ANSWER_SIZE) {
            uint32_t id;
            uint8_t status;
            uint64_t token;
            lc_session_decode_answer(buf + off, &id, &status, &token);
            deliver(s, id, status, token);
        }
        pthread_mutex_unlock(&s->mu);
        memmove(buf, buf + off, have - off);
        have -= off;
    }
    pthread_mutex_lock(&s->mu);
    s->broken = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Moves the queued calls the server may receive now into pending and writes
 * their frames into buf; returns the length. mu held. */
static size_t take(lc_session *s, uint8_t *buf, size_t cap, int64_t now) {
    size_t len = 0;
    lc_call **p = &s->qhead, *last = NULL;
    while (*p) {
        lc_call *c = *p;
        if (c->dropped) {
            *p = c->next;
            if (c->reissue) unreserve(s, c->id);
            free_call(c);
            continue;
        }
        size_t limit = c->action == LC_ACTION_PING ? MAX_PENDING : MAX_PENDING - 1;
        /* Room for the request and a Cancel after it. */
        if ((c->action != LC_ACTION_CANCEL && s->npending >= limit) ||
            cap - len < LC_SESSION_REQUEST_MAX + LC_SESSION_REQUEST_MAX) {
            last = c;
            p = &c->next;
            continue;
        }
        size_t n = 0;
        if (c->action == LC_ACTION_CANCEL) {
            lc_session_encode_request(buf + len, cap - len, &n, LC_ACTION_CANCEL, (uint32_t)c->token,
                                      0, NULL);
            len += n;
            *p = c->next;
            free_call(c); /* never answered */
            continue;
        }
        bool keep_id = false;
        if (c->reissue) {
            /* Sent again with its old id, reserved until now (a pending
             * request cannot carry it; the check is a guard). */
            unreserve(s, c->id);
            c->reissue = false;
            keep_id = pending_find(s, c->id) == NULL;
        }
        if (!keep_id) {
            while (pending_find(s, s->next_id) != NULL || id_reserved(s, s->next_id)) s->next_id++;
            c->id = s->next_id++;
        }
        if (lc_session_encode_request(buf + len, cap - len, &n, c->action, c->id, c->token,
                                      c->key) != LC_OK) {
            *p = c->next; /* keys were checked by the caller: cannot happen */
            complete(s, c, 0, 0, LC_ERR_INVALID);
            continue;
        }
        len += n;
        c->sent = true;
        c->sent_at = now;
        pending_add(s, c);
        if (c->action == LC_ACTION_UNLOCK && !c->internal) held_drop(s, c->key, c->token);
        if (c->action == LC_ACTION_LOCK && c->gave_up) {
            /* A reissue whose caller gave up before it went out: withdrawn at
             * once (a grant it finds is given back when its '+' comes). */
            lc_session_encode_request(buf + len, cap - len, &n, LC_ACTION_CANCEL, c->id, 0, NULL);
            len += n;
        }
        *p = c->next;
    }
    s->qtail = last;
    if (len > 0) s->last_sent = now;
    return len;
}

/* Writes for one connection, and pings, until it breaks or the session
 * ends. mu held on entry and on return. */
static void serve(lc_session *s, uint8_t *buf) {
    int64_t every = s->ttl_ms / 3;
    /* A write blocked this long means a dead peer: the connection is dropped. */
    int64_t write_timeout = every < 1000 ? 1000 : every;
    while (!s->ended && !s->broken) {
        int64_t now = lc__now_ms();
        if (s->ping && s->ping->sent && now - s->ping->sent_at >= every) {
            s->broken = true; /* no answer to Ping for a third of the TTL: dead */
            break;
        }
        if (s->ping == NULL && (now - s->last_sent >= every || now - s->confirmed >= every)) {
            s->ping = new_call(LC_ACTION_PING, NULL, 0, true);
            if (s->ping) enqueue(s, s->ping);
        }
        size_t len = take(s, buf, WRITE_BUF, now);
        if (len > 0) {
            pthread_mutex_unlock(&s->mu);
            lc_err e = lc__conn_send(&s->conn, buf, len, now + write_timeout, NULL);
            pthread_mutex_lock(&s->mu);
            if (e != LC_OK) s->broken = true;
            continue; /* what was queued during the write goes next */
        }
        int64_t wake;
        if (s->ping && s->ping->sent) {
            wake = s->ping->sent_at + every;
        } else if (s->ping) {
            wake = now + every; /* held back: an answer wakes the writer */
        } else {
            int64_t base = s->last_sent < s->confirmed ? s->last_sent : s->confirmed;
            wake = base + every;
        }
        if (wake <= now) wake = now + 1;
        timed_wait(&s->wake, &s->mu, wake);
    }
}

static void stop_reader(lc_session *s) {
    lc__conn_interrupt(&s->conn);
    if (s->reader_running) {
        pthread_t r = s->reader;
        s->reader_running = false;
        pthread_mutex_unlock(&s->mu);
        pthread_join(r, NULL);
        pthread_mutex_lock(&s->mu);
    }
    lc__conn_close(&s->conn);
}

static bool start_reader(lc_session *s) {
    s->broken = false;
    if (pthread_create(&s->reader, NULL, reader_main, s) != 0) return false;
    s->reader_running = true;
    return true;
}

/* Reconnects with a growing back-off until the server takes the session
 * back (LC_OK, mu held, connection set), refuses it, or the holds are no
 * longer certain (LC_ERR_SESSION_LOST). mu held on entry and return. */
static lc_err resume(lc_session *s) {
    int64_t backoff = MIN_BACKOFF_MS;
    for (;;) {
        if (s->ended) return s->err;
        int64_t deadline = s->confirmed + s->ttl_ms;
        if (lc__now_ms() >= deadline) return LC_ERR_SESSION_LOST;
        pthread_mutex_unlock(&s->mu);
        lc_conn k;
        uint32_t ttl;
        uint64_t id;
        int64_t sent_at = 0;
        lc_err e = open_conn(s, s->id, deadline, &k, &ttl, &id, &sent_at);
        pthread_mutex_lock(&s->mu);
        if (e == LC_OK) {
            if (s->ended) {
                lc__conn_close(&k);
                return s->err;
            }
            s->conn = k;
            resumed(s, sent_at);
            pthread_cond_broadcast(&s->changed);
            if (!start_reader(s)) {
                lc__conn_close(&s->conn);
                return LC_ERR_SYSTEM;
            }
            return LC_OK;
        }
        if (e == LC_ERR_REFUSED) return LC_ERR_SESSION_LOST;
        /* Wait min(backoff with jitter, time left), unless the session ends. */
        int64_t wait = backoff / 2 + (int64_t)(next_rand(s) % (uint64_t)(backoff / 2 + 1));
        int64_t until = lc__now_ms() + wait;
        if (until > deadline) until = deadline;
        while (!s->ended && lc__now_ms() < until) timed_wait(&s->wake, &s->mu, until);
        backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
    }
}

/* The supervisor: serves the connection until it breaks, resumes, and so
 * on until the session ends. */
static void *supervisor_main(void *arg) {
    lc_session *s = arg;
    uint8_t *buf = malloc(WRITE_BUF);
    bool lost = false;
    pthread_mutex_lock(&s->mu);
    if (buf == NULL) {
        lost = finish(s, LC_ERR_SESSION_LOST);
    }
    while (!s->ended) {
        serve(s, buf);
        if (s->ended) break;
        if (s->closing && s->close_ok) {
            finish(s, LC_ERR_SESSION_CLOSED);
            break;
        }
        disconnected(s);
        stop_reader(s);
        if (s->ended) break;
        lc_err e = resume(s);
        if (e != LC_OK) {
            lost = finish(s, s->closing ? LC_ERR_SESSION_CLOSED : e == LC_ERR_SYSTEM ? LC_ERR_SESSION_LOST : e);
        }
    }
    lost = lost && s->err == LC_ERR_SESSION_LOST;
    stop_reader(s);
    lc_session_lost_fn fn = s->on_lost;
    pthread_mutex_unlock(&s->mu);
    free(buf);
    if (lost && fn) {
        fn(s, LC_ERR_SESSION_LOST, s->on_lost_arg);
        pthread_mutex_lock(&s->mu);
        s->reported = true;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------ */

void lc_session_options_init(lc_session_options *o) {
    if (o == NULL) return;
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = 5000;
    o->io_timeout_ms = 30000;
}

lc_err lc_session_open(const lc_session_options *o, lc_session **out) {
    if (o == NULL || out == NULL) return LC_ERR_INVALID;
    *out = NULL;
    if ((o->source && strlen(o->source) > LC_MAX_NAME) || (o->auth && strlen(o->auth) > LC_MAX_NAME)) {
        return LC_ERR_INVALID;
    }
    lc_session *s = calloc(1, sizeof *s);
    if (s == NULL) return LC_ERR_SYSTEM;
    lc_err e = lc_client_init(&s->addr, o->address, NULL);
    if (e != LC_OK) {
        free(s);
        return e;
    }
    s->addr.connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    if (o->source) strcpy(s->source, o->source);
    if (o->auth) strcpy(s->auth, o->auth);
    s->ttl_asked = o->ttl_ms;
    s->io_timeout_ms = o->io_timeout_ms;
    s->on_lost = o->on_lost;
    s->on_lost_arg = o->on_lost_arg;
    s->addr.tls = o->tls;
    s->rng_dial = lc__rand_seed();
    lc__conn_init(&s->conn);
    if (lc_cancel_init(&s->stop) != LC_OK) {
        free(s);
        return LC_ERR_SYSTEM;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0 || init_cond(&s->wake) != 0 ||
        init_cond(&s->changed) != 0) {
        lc_cancel_destroy(&s->stop);
        free(s);
        return LC_ERR_SYSTEM;
    }
    lc_conn k;
    int64_t sent_at = 0;
    /* OPEN_ROUNDS rounds over the addresses, with the back-off between. */
    int64_t backoff = MIN_BACKOFF_MS;
    for (int round = 1;; round++) {
        e = open_conn(s, 0, LC_NO_DEADLINE, &k, &s->ttl_ms, &s->id, &sent_at);
        if (e != LC_ERR_UNREACHABLE && e != LC_ERR_PROTOCOL) break;
        if (round == OPEN_ROUNDS) break;
        int64_t wait = backoff / 2 + (int64_t)(lc__rand_next(&s->rng_dial) % (uint64_t)(backoff / 2 + 1));
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)wait * 1000000L};
        nanosleep(&ts, NULL);
        backoff *= 2;
    }
    if (e == LC_ERR_TIMEOUT || e == LC_ERR_PROTOCOL) e = LC_ERR_UNREACHABLE;
    if (e != LC_OK) {
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->mu);
        lc_cancel_destroy(&s->stop);
        free(s);
        return e;
    }
    s->rng = s->id | 1;
    s->confirmed = s->last_sent = sent_at;
    s->conn = k;
    pthread_mutex_lock(&s->mu);
    bool ok = start_reader(s);
    pthread_mutex_unlock(&s->mu);
    if (ok && pthread_create(&s->supervisor, NULL, supervisor_main, s) != 0) {
        pthread_mutex_lock(&s->mu);
        stop_reader(s);
        pthread_mutex_unlock(&s->mu);
        ok = false;
    }
    if (!ok) {
        lc__conn_close(&s->conn);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->mu);
        lc_cancel_destroy(&s->stop);
        free(s);
        return LC_ERR_SYSTEM;
    }
    *out = s;
    return LC_OK;
}

uint64_t lc_session_id(const lc_session *s) { return s ? s->id : 0; }
uint32_t lc_session_ttl_ms(const lc_session *s) { return s ? s->ttl_ms : 0; }

lc_err lc_session_state(lc_session *s) {
    if (s == NULL) return LC_ERR_INVALID;
    pthread_mutex_lock(&s->mu);
    lc_err e = s->ended ? s->err : LC_OK;
    pthread_mutex_unlock(&s->mu);
    return e;
}

bool lc_session_connected(lc_session *s) {
    if (s == NULL) return false;
    pthread_mutex_lock(&s->mu);
    bool c = !s->ended && s->conn.fd >= 0 && !s->broken;
    pthread_mutex_unlock(&s->mu);
    return c;
}

lc_err lc_session_wait_end(lc_session *s, int timeout_ms) {
    if (s == NULL) return LC_ERR_INVALID;
    int64_t deadline = timeout_ms > 0 ? lc__now_ms() + timeout_ms + 1 : LC_NO_DEADLINE;
    /* On the supervisor thread (from on_lost) the end is not awaited: it
     * is being told by this very call. */
    bool own = pthread_equal(pthread_self(), s->supervisor) != 0;
    pthread_mutex_lock(&s->mu);
    while (!(s->ended && (s->reported || own)) && lc__now_ms() < deadline) {
        timed_wait(&s->changed, &s->mu, deadline);
    }
    lc_err e = s->ended ? s->err : LC_OK;
    pthread_mutex_unlock(&s->mu);
    return e;
}

/* A program call returns: the session may be closing, waiting for it. */
static void leave(lc_session *s) {
    if (--s->callers == 0 && s->closing) pthread_cond_broadcast(&s->changed);
}

/*
 * Sends a request and waits for its outcome. timeout_ms <= 0: no limit.
 * On LC_OK, *status and *token are the answer's. On timeout or cancel, a
 * Lock is cancelled (and a crossed grant unlocked) before this returns.
 */
static lc_err roundtrip(lc_session *s, int action, const char *key, uint64_t req_token,
                        int timeout_ms, lc_cancel *cancel, uint8_t *status, uint64_t *token) {
    if (s == NULL) return LC_ERR_INVALID;
    if (cancel != NULL && lc_cancel_triggered(cancel)) return LC_ERR_CANCELED;
    lc_call *c = new_call(action, key, req_token, false);
    if (c == NULL) return LC_ERR_SYSTEM;
    if (cancel != NULL) {
        if (pipe(c->wake) != 0 || lc__set_flags(c->wake[0]) != 0 || lc__set_flags(c->wake[1]) != 0) {
            free_call(c);
            return LC_ERR_SYSTEM;
        }
    }
    /* + 1: the clock is in whole milliseconds, and a timeout never fires early. */
    int64_t deadline = timeout_ms > 0 ? lc__now_ms() + timeout_ms + 1 : LC_NO_DEADLINE;
    pthread_mutex_lock(&s->mu);
    if (s->ended) {
        lc_err e = s->err;
        pthread_mutex_unlock(&s->mu);
        free_call(c);
        return e;
    }
    s->callers++;
    enqueue(s, c);
    lc_err why = LC_OK;
    while (!c->done) {
        if (cancel == NULL) {
            if (lc__now_ms() >= deadline) {
                why = LC_ERR_TIMEOUT;
                break;
            }
            timed_wait(&c->cv, &s->mu, deadline);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        lc_err w = lc__wait_fd(c->wake[0], POLLIN, deadline, cancel);
        pthread_mutex_lock(&s->mu);
        if (c->done) break;
        if (w == LC_ERR_TIMEOUT || w == LC_ERR_CANCELED) {
            why = w;
            break;
        }
        if (w == LC_ERR_SYSTEM) {
            why = LC_ERR_SYSTEM;
            break;
        }
        /* A wake byte without done cannot happen; loop. */
    }
    if (!c->done) {
        /* Giving up. A reissue waiting for the resume may find a grant made
         * before the drop: it goes out all the same, a Lock's Cancel right
         * behind it (take), and a grant it finds is given back. */
        if (!c->sent && !c->reissue) {
            c->dropped = true; /* nothing reached the server; the writer frees it */
            c->caller = false;
            leave(s);
            pthread_mutex_unlock(&s->mu);
            return why;
        }
        c->gave_up = true;
        if (action == LC_ACTION_LOCK) {
            if (c->sent) {
                lc_call *x = new_call(LC_ACTION_CANCEL, NULL, c->id, true);
                if (x) enqueue(s, x);
            }
            /* The lock's one answer comes one round trip later: wait for it,
             * so that a grant that crossed the Cancel is released first. */
            int64_t grace = lc__now_ms() + CANCEL_GRACE_MS;
            while (!c->done && lc__now_ms() < grace) timed_wait(&c->cv, &s->mu, grace);
        }
        if (!c->done) {
            c->caller = false; /* the session frees it when it ends */
            leave(s);
            pthread_mutex_unlock(&s->mu);
            if (action == LC_ACTION_UNLOCK || action == LC_ACTION_RESET_BY_KEY ||
                action == LC_ACTION_RESET_BY_SOURCE) {
                return LC_ERR_OUTCOME_UNKNOWN;
            }
            return why;
        }
        /* Settled within the grace: '-' (withdrawn), or the crossed grant
         * was released, or the connection or session ended. */
        leave(s);
        pthread_mutex_unlock(&s->mu);
        free_call(c);
        return why;
    }
    lc_err e = c->err;
    if (status) *status = c->status;
    if (token) *token = c->answer_token;
    bool closing = s->closing;
    leave(s);
    pthread_mutex_unlock(&s->mu);
    free_call(c);
    if (e == LC_OK && closing && *status == '-' && action == LC_ACTION_LOCK) {
        return LC_ERR_SESSION_CLOSED; /* refused by this session's Close */
    }
    return e;
}

lc_err lc_session_lock(lc_session *s, const char *key, int timeout_ms, lc_cancel *cancel,
                       uint64_t *token) {
    if (token) *token = 0;
    if (!valid_key(key)) return LC_ERR_INVALID;
    uint8_t st = 0;
    uint64_t tok = 0;
    lc_err e = roundtrip(s, LC_ACTION_LOCK, key, 0, timeout_ms, cancel, &st, &tok);
    if (e != LC_OK) return e;
    switch (st) {
    case '+':
        if (token) *token = tok;
        return LC_OK;
    case '-': return LC_ERR_RESET;
    default: return LC_ERR_PROTOCOL;
    }
}

lc_err lc_session_trylock(lc_session *s, const char *key, uint64_t *token) {
    if (token) *token = 0;
    if (!valid_key(key)) return LC_ERR_INVALID;
    uint8_t st = 0;
    uint64_t tok = 0;
    lc_err e = roundtrip(s, LC_ACTION_TRYLOCK, key, 0, s ? s->io_timeout_ms : 0, NULL, &st, &tok);
    if (e != LC_OK) return e;
    switch (st) {
    case '+':
        if (token) *token = tok;
        return LC_OK;
    case '#': return LC_ERR_NOT_WON;
    case '-': return LC_ERR_REFUSED;
    default: return LC_ERR_PROTOCOL;
    }
}

static lc_err plus(lc_session *s, int action, const char *key, uint64_t token, lc_err on_minus) {
    uint8_t st = 0;
    lc_err e = roundtrip(s, action, key, token, s ? s->io_timeout_ms : 0, NULL, &st, NULL);
    if (e != LC_OK) return e;
    return st == '+' ? LC_OK : st == '-' ? on_minus : LC_ERR_PROTOCOL;
}

lc_err lc_session_unlock(lc_session *s, const char *key, uint64_t token) {
    if (!valid_key(key)) return LC_ERR_INVALID;
    return plus(s, LC_ACTION_UNLOCK, key, token, LC_ERR_NOT_HELD);
}

lc_err lc_session_reset_key(lc_session *s, const char *key) {
    if (!valid_key(key)) return LC_ERR_INVALID;
    return plus(s, LC_ACTION_RESET_BY_KEY, key, 0, LC_ERR_REFUSED);
}

lc_err lc_session_reset_source(lc_session *s, const char *source) {
    if (source && strlen(source) > LC_MAX_NAME) return LC_ERR_INVALID;
    return plus(s, LC_ACTION_RESET_BY_SOURCE, source ? source : "", 0, LC_ERR_REFUSED);
}

lc_err lc_session_with_lock(lc_session *s, const char *key, int timeout_ms, lc_cancel *cancel,
                            lc_session_locked_fn fn, void *arg, int *fn_result) {
    if (fn == NULL) return LC_ERR_INVALID;
    uint64_t token = 0;
    lc_err e = lc_session_lock(s, key, timeout_ms, cancel, &token);
    if (e != LC_OK) return e;
    int r = fn(arg, token);
    if (fn_result) *fn_result = r;
    e = lc_session_state(s);
    if (e != LC_OK) return e; /* the hold ended with the session, under fn */
    return lc_session_unlock(s, key, token);
}

lc_err lc_session_close(lc_session *s, int timeout_ms) {
    if (s == NULL) return LC_OK;
    if (pthread_equal(pthread_self(), s->supervisor)) {
        return LC_ERR_INVALID; /* from on_lost: joining its own thread would hang */
    }
    int64_t deadline = lc__now_ms() + (timeout_ms > 0 ? timeout_ms : CLOSE_TIMEOUT_MS);
    lc_err result = LC_OK;
    pthread_mutex_lock(&s->mu);
    s->closing = true;
    /* A Close lost with its connection is sent again on the next one:
     * closing twice is harmless, and a Close that did apply makes that
     * resume fail, which ends the session as closed. */
    while (!s->ended) {
        lc_call *c = new_call(LC_ACTION_CLOSE, NULL, 0, false);
        if (c == NULL) {
            result = LC_ERR_SYSTEM;
            break;
        }
        enqueue(s, c);
        while (!c->done && lc__now_ms() < deadline) timed_wait(&c->cv, &s->mu, deadline);
        if (!c->done) {
            c->caller = false; /* freed by finish below */
            result = LC_ERR_TIMEOUT;
            break;
        }
        lc_err e = c->err;
        uint8_t st = c->status;
        free_call(c);
        if (e == LC_OK) {
            result = st == '+' ? LC_OK : LC_ERR_PROTOCOL;
            break;
        }
        if (e != LC_ERR_DISCONNECTED) {
            result = e == LC_ERR_SESSION_CLOSED ? LC_OK : e;
            break;
        }
        /* Disconnected: wait for the resume (or the loss) and send it again. */
        while (!s->ended && (s->conn.fd < 0 || s->broken) && lc__now_ms() < deadline) {
            timed_wait(&s->changed, &s->mu, deadline);
        }
        if (lc__now_ms() >= deadline) {
            result = LC_ERR_TIMEOUT;
            break;
        }
    }
    if (s->ended && s->err == LC_ERR_SESSION_LOST && result == LC_OK) result = LC_ERR_SESSION_LOST;
    finish(s, LC_ERR_SESSION_CLOSED);
    pthread_mutex_unlock(&s->mu);
    lc_cancel_trigger(&s->stop);
    pthread_join(s->supervisor, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->callers > 0) pthread_cond_wait(&s->changed, &s->mu);
    pthread_mutex_unlock(&s->mu);
    free(s->strays);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->mu);
    lc_cancel_destroy(&s->stop);
    free(s);
    return result;
}
