/*
 * test_lockingcenter.c - tests of the C client.
 *
 *   test_lockingcenter            runs every test, prints "N passed, M failed"
 *   test_lockingcenter NAME       runs one test; exit 0 pass, 1 fail, 77 skip
 *
 * Vector tests read $LC_VECTORS (the repo's wire/testdata/vectors.json when
 * unset and found). Conformance tests talk to the real server at
 * $LC_TEST_ADDRESS (web port $LC_TEST_WEB_ADDRESS) and skip without it.
 * Fake-server tests run a one-connection server on 127.0.0.1 in a thread.
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"
#include "json.h"
#include "lockingcenter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int failures;

/* ---- helpers ---------------------------------------------------------- */

int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

size_t hex_decode(const char *hex, uint8_t *out, size_t cap) {
    size_t n = strlen(hex) / 2;
    if (n > cap) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned b;
        sscanf(hex + 2 * i, "%2x", &b);
        out[i] = (uint8_t)b;
    }
    return n;
}

/* A loopback port nothing listens on (bound, then closed). */
int dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

static void dead_client(lc_client *c, const char *source) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", dead_port());
    lc_client_init(c, addr, source);
}

json *load_vectors(void) {
    const char *path = getenv("LC_VECTORS");
    if (path == NULL || path[0] == '\0') path = getenv("LC_VECTORS_DEFAULT");
    if (path == NULL || path[0] == '\0') path = "../../wire/testdata/vectors.json";
    json *v = json_parse_file(path);
    if (v == NULL) fprintf(stderr, "  cannot read or parse vectors file %s\n", path);
    return v;
}

/* ---- fake server ------------------------------------------------------ */

/* FAKE_GRANT_AFTER_EOF: as FAKE_HOLD, then answers '+' 150 ms after the EOF,
 * like a server that granted the key just before it noticed the hang-up.
 * FAKE_SILENT_AFTER_EOF: as FAKE_HOLD, then keeps the connection open and
 * sends nothing until fake_stop (at most 5 s after the EOF), like a server
 * that never closes after a hang-up. */
enum { FAKE_CLOSE = -1, FAKE_HOLD = -2, FAKE_GRANT_AFTER_EOF = -3, FAKE_SILENT_AFTER_EOF = -4 };

typedef struct {
    int lfd, port;
    int answer;        /* byte to answer, FAKE_CLOSE, FAKE_HOLD (until EOF), FAKE_GRANT_AFTER_EOF
                          or FAKE_SILENT_AFTER_EOF */
    uint8_t got[512];
    size_t got_len;
    int saw_eof;       /* FAKE_HOLD, FAKE_*_AFTER_EOF: the client hung up */
    int sent_grant;    /* FAKE_GRANT_AFTER_EOF: the '+' was written */
    int extra_conn;    /* set by fake_stop: a second connection was waiting (e.g. an Unlock) */
    int got_frame;     /* the whole frame is in (atomic: read by trigger_on_frame) */
    int stop;          /* set by fake_stop (atomic): FAKE_SILENT_AFTER_EOF closes now */
    pthread_t th;
} fake_server;

static void *fake_run(void *arg) {
    fake_server *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    /* Read until a whole frame is in (sizes from the frame itself). */
    for (;;) {
        if (f->got_len >= 3) {
            size_t klen = f->got[1];
            if (f->got_len >= 3 + klen && f->got_len >= 3 + klen + f->got[2 + klen]) {
                __atomic_store_n(&f->got_frame, 1, __ATOMIC_RELEASE);
                break;
            }
        }
        ssize_t n = recv(fd, f->got + f->got_len, sizeof f->got - f->got_len, 0);
        if (n <= 0) break;
        f->got_len += (size_t)n;
    }
    if (f->answer >= 0) {
        uint8_t b = (uint8_t)f->answer;
        send(fd, &b, 1, 0);
    } else if (f->answer == FAKE_HOLD || f->answer == FAKE_GRANT_AFTER_EOF ||
               f->answer == FAKE_SILENT_AFTER_EOF) {
        uint8_t b;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) > 0 && recv(fd, &b, 1, 0) == 0) f->saw_eof = 1;
        if (f->saw_eof && f->answer == FAKE_GRANT_AFTER_EOF) {
            sleep_ms(150);
            b = '+';
            f->sent_grant = send(fd, &b, 1, MSG_NOSIGNAL) == 1;
        }
        if (f->saw_eof && f->answer == FAKE_SILENT_AFTER_EOF) {
            int64_t end = now_ms() + 5000;
            while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) && now_ms() < end) sleep_ms(5);
        }
    }
    close(fd);
    return NULL;
}

static void fake_start(fake_server *f, int answer, lc_client *c, const char *source) {
    memset(f, 0, sizeof *f);
    f->answer = answer;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(f->lfd, (struct sockaddr *)&a, sizeof a);
    listen(f->lfd, 4);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->th, NULL, fake_run, f);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", f->port);
    lc_client_init(c, addr, source);
}

static void fake_stop(fake_server *f) {
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_join(f->th, NULL);
    /* The calls are synchronous: any further connection the client made
     * (an Unlock) is already in the listen queue by now. */
    struct pollfd p = {.fd = f->lfd, .events = POLLIN};
    f->extra_conn = poll(&p, 1, 0) > 0;
    close(f->lfd);
}

/* ---- real server helpers ---------------------------------------------- */

char run_id[32];

void unique_key(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "c-test-%s-%s", run_id, name);
}

static int server(lc_client *c, const char *source) {
    const char *addr = getenv("LC_TEST_ADDRESS");
    if (addr == NULL || addr[0] == '\0') {
        fprintf(stderr, "  LC_TEST_ADDRESS not set: skipped\n");
        return SKIP;
    }
    if (lc_client_init(c, addr, source) != LC_OK) {
        fprintf(stderr, "  bad LC_TEST_ADDRESS %s\n", addr);
        return 1;
    }
    return 0;
}

/*
 * GET http://$LC_TEST_WEB_ADDRESS/api/v1/keys/KEY. Returns the number of
 * waiters in "queue" (0 also when the key is not held: 404), or -1 when the
 * web API cannot be asked.
 */
int queue_length(const char *key) {
    const char *web = getenv("LC_TEST_WEB_ADDRESS");
    lc_client w;
    if (web == NULL || lc_client_init(&w, web, NULL) != LC_OK) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(w.port))};
    if (inet_pton(AF_INET, strcmp(w.host, "localhost") == 0 ? "127.0.0.1" : w.host, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    char req[512];
    int n = snprintf(req, sizeof req, "GET /api/v1/keys/%s HTTP/1.0\r\nHost: %s\r\n\r\n", key, web);
    if (send(fd, req, (size_t)n, 0) != n) { close(fd); return -1; }
    char resp[16384];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof resp - 1 && (r = recv(fd, resp + got, sizeof resp - 1 - got, 0)) > 0) {
        got += (size_t)r;
    }
    close(fd);
    resp[got] = '\0';
    int status = 0;
    if (sscanf(resp, "HTTP/%*s %d", &status) != 1) return -1;
    if (status == 404) {
        /* 404 names a key that is not held; any other body (no JSON) means
         * the route itself is missing. */
        return strstr(resp, "\r\n\r\n{") || strstr(resp, "application/json") ? 0 : -1;
    }
    if (status != 200) return -1;
    const char *q = strstr(resp, "\"queue\"");
    if (q == NULL || (q = strchr(q, '[')) == NULL) return -1;
    int depth = 0, count = 0;
    for (q++; *q && !(depth == 0 && *q == ']'); q++) {
        if (*q == '"') { /* skip strings */
            for (q++; *q && *q != '"'; q++) if (*q == '\\' && q[1]) q++;
            continue;
        }
        if (*q == '{') { if (depth == 0) count++; depth++; }
        if (*q == '}') depth--;
    }
    return count;
}

/* Polls the web API until key has want waiters; true when seen. */
bool wait_queue(const char *key, int want, int timeout_ms) {
    int64_t end = now_ms() + timeout_ms;
    do {
        if (queue_length(key) == want) return true;
        sleep_ms(20);
    } while (now_ms() < end);
    return false;
}

/* Lets a background waiter reach the queue: seen through the web API, or a
 * pause when the API is not there. */
static void let_queue(const char *key, int want) {
    if (queue_length(key) < 0) {
        fprintf(stderr, "  web API not reachable: pausing instead\n");
        sleep_ms(300);
        return;
    }
    if (!wait_queue(key, want, 3000)) {
        fprintf(stderr, "  %s: %d waiters not seen in the web API\n", key, want);
    }
}

typedef struct {
    const lc_client *c;
    const char *key;
    int timeout_ms;
    lc_cancel *cancel;
    lc_err result;
    int hold_ms;         /* lock: hold this long, then unlock */
    int *order;          /* records id at *order_n when granted */
    int *order_n;
    pthread_mutex_t *mu;
    int id;
    int wait_only;
    pthread_t th;
} waiter;

static void *waiter_run(void *arg) {
    waiter *w = arg;
    if (w->wait_only) {
        w->result = lc_wait(w->c, w->key, w->timeout_ms, w->cancel);
        return NULL;
    }
    w->result = lc_lock(w->c, w->key, w->timeout_ms, w->cancel);
    if (w->result == LC_OK) {
        if (w->order) {
            pthread_mutex_lock(w->mu);
            w->order[(*w->order_n)++] = w->id;
            pthread_mutex_unlock(w->mu);
        }
        sleep_ms(w->hold_ms);
        lc_unlock(w->c, w->key);
    }
    return NULL;
}

/* ---- offline tests ---------------------------------------------------- */

static int test_vector_frames(void) {
    json *v = load_vectors();
    if (!v) return 1;
    const json *frames = json_get(v, "frames");
    CHECK(frames && frames->type == J_ARR && frames->n > 0);
    for (size_t i = 0; frames && i < frames->n; i++) {
        const json *f = &frames->items[i];
        uint8_t want[LC_MAX_FRAME + 8], got[LC_MAX_FRAME];
        size_t wlen = hex_decode(json_get(f, "hex")->str, want, sizeof want), glen = 0;
        lc_err e = lc_encode(got, sizeof got, &glen, (int)json_get(f, "action")->num,
                             json_get(f, "key")->str, json_get(f, "source")->str);
        if (e != LC_OK || glen != wlen || memcmp(got, want, wlen) != 0) {
            fprintf(stderr, "  frame \"%s\": encoded differently (%s)\n", json_get(f, "name")->str,
                    lc_strerror(e));
            failures++;
        }
    }
    json_free(v);
    return failures ? 1 : 0;
}

/* Calls the client function for action with key, against c. */
static lc_err call_action(const lc_client *c, int action, const char *key) {
    bool won;
    switch (action) {
    case LC_ACTION_LOCK: return lc_lock(c, key, 1000, NULL);
    case LC_ACTION_UNLOCK: return lc_unlock(c, key);
    case LC_ACTION_RESET_BY_KEY: return lc_reset_key(c, key);
    case LC_ACTION_RESET_BY_SOURCE: return lc_reset_source(c, NULL);
    case LC_ACTION_TRYLOCK: return lc_trylock(c, key, &won);
    }
    return LC_ERR_PROTOCOL;
}

static int test_vector_invalid(void) {
    json *v = load_vectors();
    if (!v) return 1;
    const json *inv = json_get(v, "invalid");
    CHECK(inv && inv->type == J_ARR && inv->n > 0);
    for (size_t i = 0; inv && i < inv->n; i++) {
        const json *f = &inv->items[i];
        const char *name = json_get(f, "name")->str, *key = json_get(f, "key")->str;
        const char *source = json_get(f, "source")->str;
        int action = (int)json_get(f, "action")->num;
        uint8_t buf[LC_MAX_FRAME * 2];
        size_t len;
        if (lc_encode(buf, sizeof buf, &len, action, key, source) != LC_ERR_INVALID) {
            fprintf(stderr, "  invalid \"%s\": encoder accepted it\n", name);
            failures++;
        }
        /* The public call refuses it too, before connecting: against an
         * address nothing listens on it must say invalid, not unreachable. */
        lc_client c;
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", dead_port());
        lc_err e = lc_client_init(&c, addr, source);
        if (e == LC_OK) e = call_action(&c, action, key);
        if (e != LC_ERR_INVALID) {
            fprintf(stderr, "  invalid \"%s\": call gave \"%s\"\n", name, lc_strerror(e));
            failures++;
        }
    }
    json_free(v);
    return failures ? 1 : 0;
}

/* Every answer byte of the vectors, for every action, through a fake server
 * that also checks the bytes it received. */
static int test_vector_answers(void) {
    json *v = load_vectors();
    if (!v) return 1;
    const json *answers = json_get(v, "answers");
    CHECK(answers && answers->type == J_ARR && answers->n == 3);
    for (size_t i = 0; answers && i < answers->n; i++) {
        uint8_t b;
        hex_decode(json_get(&answers->items[i], "hex")->str, &b, 1);
        CHECK((char)b == json_get(&answers->items[i], "char")->str[0]);
        for (int action = 1; action <= 5; action++) {
            fake_server f;
            lc_client c;
            fake_start(&f, b, &c, "svc-a");
            bool won = false;
            lc_err e, want;
            switch (action) {
            case LC_ACTION_LOCK:
                e = lc_lock(&c, "abc", 2000, NULL);
                want = b == '+' ? LC_OK : b == '-' ? LC_ERR_RESET : LC_ERR_PROTOCOL;
                break;
            case LC_ACTION_TRYLOCK:
                e = lc_trylock(&c, "abc", &won);
                want = b == '-' ? LC_ERR_REFUSED : LC_OK;
                CHECK(won == (b == '+'));
                break;
            default:
                e = call_action(&c, action, "abc");
                want = b == '+' ? LC_OK : b == '-' ? LC_ERR_REFUSED : LC_ERR_PROTOCOL;
            }
            fake_stop(&f);
            if (e != want) {
                fprintf(stderr, "  action %d answer '%c': \"%s\", want \"%s\"\n", action, b,
                        lc_strerror(e), lc_strerror(want));
                failures++;
            }
            uint8_t frame[LC_MAX_FRAME];
            size_t len;
            lc_encode(frame, sizeof frame, &len, action,
                      action == LC_ACTION_RESET_BY_SOURCE ? "" : "abc",
                      action == LC_ACTION_RESET_BY_KEY ? "" : "svc-a");
            CHECK(f.got_len == len && memcmp(f.got, frame, len) == 0);
        }
    }
    json_free(v);
    return failures ? 1 : 0;
}

static int test_address(void) {
    lc_client c;
    CHECK_ERR(lc_client_init(&c, "db.example:1234", "me"), LC_OK);
    CHECK(strcmp(c.host, "db.example") == 0 && strcmp(c.port, "1234") == 0);
    CHECK(strcmp(c.source, "me") == 0);
    CHECK(c.connect_timeout_ms == 5000 && c.io_timeout_ms == 30000);
    CHECK_ERR(lc_client_init(&c, "host-only", NULL), LC_OK);
    CHECK(strcmp(c.port, "22119") == 0 && c.source[0] == '\0');
    CHECK_ERR(lc_client_init(&c, NULL, NULL), LC_OK);
    CHECK(strcmp(c.host, "localhost") == 0 && strcmp(c.port, "22119") == 0);
    CHECK_ERR(lc_client_init(&c, "[::1]:99", NULL), LC_OK);
    CHECK(strcmp(c.host, "::1") == 0 && strcmp(c.port, "99") == 0);
    CHECK_ERR(lc_client_init(&c, "::1", NULL), LC_OK);
    CHECK(strcmp(c.host, "::1") == 0 && strcmp(c.port, "22119") == 0);
    CHECK_ERR(lc_client_init(&c, "h:0", NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_client_init(&c, "h:65536", NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_client_init(&c, "h:x", NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_client_init(&c, ":80", NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_client_init(&c, "[::1", NULL), LC_ERR_INVALID);
    /* An uninitialised (failed) client is refused, not used. */
    CHECK_ERR(lc_unlock(&c, "k"), LC_ERR_INVALID);
    for (int e = LC_OK; e <= LC_ERR_SYSTEM; e++) CHECK(lc_strerror((lc_err)e)[0] != '\0');
    return failures ? 1 : 0;
}

static int test_overlong_key_before_connect(void) {
    char key[200];
    memset(key, 'k', 128);
    key[128] = '\0';
    lc_client c;
    dead_client(&c, NULL);
    CHECK_ERR(lc_lock(&c, key, 0, NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_wait(&c, key, 0, NULL), LC_ERR_INVALID);
    CHECK_ERR(lc_unlock(&c, key), LC_ERR_INVALID);
    CHECK_ERR(lc_lock(&c, NULL, 0, NULL), LC_ERR_INVALID);
    key[127] = '\0';
    /* The same client with a valid key does connect, and finds nobody. */
    CHECK_ERR(lc_unlock(&c, key), LC_ERR_UNREACHABLE);
    CHECK_ERR(lc_lock(&c, key, 0, NULL), LC_ERR_UNREACHABLE);
    char src[200];
    memset(src, 's', 128);
    src[128] = '\0';
    CHECK_ERR(lc_reset_source(&c, src), LC_ERR_INVALID);
    return failures ? 1 : 0;
}

static int test_connect_timeout(void) {
    lc_client c;
    /* Refused: unreachable at once. */
    dead_client(&c, NULL);
    int64_t t0 = now_ms();
    CHECK_ERR(lc_unlock(&c, "k"), LC_ERR_UNREACHABLE);
    CHECK(now_ms() - t0 < 2000);

    /* A listener that never accepts, its backlog filled: on Linux further
     * SYNs are dropped and the connect hangs until the connect timeout. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(lfd, (struct sockaddr *)&a, sizeof a);
    listen(lfd, 0);
    getsockname(lfd, (struct sockaddr *)&a, &al);
    int fill[4];
    for (int i = 0; i < 4; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM, 0);
        fcntl(fill[i], F_SETFL, fcntl(fill[i], F_GETFL) | O_NONBLOCK);
        connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    sleep_ms(50);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    lc_client_init(&c, addr, NULL);
    c.connect_timeout_ms = 200;
    t0 = now_ms();
    lc_err e = lc_lock(&c, "k", 0, NULL);
    int64_t took = now_ms() - t0;
    CHECK_ERR(e, LC_ERR_UNREACHABLE);
    CHECK(took >= 150 && took < 3000);
    /* The call's own timeout, when shorter, wins and says timeout. */
    c.connect_timeout_ms = 5000;
    CHECK_ERR(lc_lock(&c, "k", 200, NULL), LC_ERR_TIMEOUT);
    for (int i = 0; i < 4; i++) close(fill[i]);
    close(lfd);
    return failures ? 1 : 0;
}

static int test_fake_closed_without_answer(void) {
    fake_server f;
    lc_client c;
    fake_start(&f, FAKE_CLOSE, &c, NULL);
    CHECK_ERR(lc_lock(&c, "k", 2000, NULL), LC_ERR_UNREACHABLE);
    fake_stop(&f);
    return failures ? 1 : 0;
}

static int test_fake_timeout_closes(void) {
    fake_server f;
    lc_client c;
    fake_start(&f, FAKE_HOLD, &c, NULL);
    int64_t t0 = now_ms();
    CHECK_ERR(lc_lock(&c, "k", 150, NULL), LC_ERR_TIMEOUT);
    int64_t took = now_ms() - t0;
    CHECK(took >= 150 && took < 2000);
    fake_stop(&f);
    CHECK(f.saw_eof); /* the socket was closed: the server would withdraw us */
    CHECK(!f.extra_conn);
    CHECK(f.got_len == 4);
    /* Calls that never queue are bounded by io_timeout_ms. */
    fake_start(&f, FAKE_HOLD, &c, NULL);
    c.io_timeout_ms = 150;
    CHECK_ERR(lc_unlock(&c, "k"), LC_ERR_TIMEOUT);
    fake_stop(&f);
    CHECK(f.saw_eof);
    return failures ? 1 : 0;
}

/* A server that never closes after the hang-up: the timed-out lock reads on
 * for the grace (LC_GIVE_UP_GRACE_MS, 2 s) and no longer, then fails with
 * the timeout. The fake closes 5 s after the EOF at the latest. */
static int test_fake_give_up_grace_bounded(void) {
    fake_server f;
    lc_client c;
    fake_start(&f, FAKE_SILENT_AFTER_EOF, &c, NULL);
    int64_t t0 = now_ms();
    CHECK_ERR(lc_lock(&c, "k", 150, NULL), LC_ERR_TIMEOUT);
    int64_t took = now_ms() - t0;
    if (took < 150 + 1900 || took >= 3500)
        fprintf(stderr, "  lc_lock took %lld ms, want 2050..3500\n", (long long)took);
    CHECK(took >= 150 + 1900); /* the grace was waited for */
    CHECK(took < 3500);        /* and no longer */
    fake_stop(&f);
    CHECK(f.saw_eof);
    CHECK(!f.extra_conn);
    CHECK(f.got_len == 4);
    return failures ? 1 : 0;
}

static void *trigger_later(void *arg) {
    sleep_ms(100);
    lc_cancel_trigger(arg);
    return NULL;
}

/* Triggers tok once the fake has the whole frame (at most 10 s): the call
 * then is waiting for its answer, not still connecting or sending. */
typedef struct {
    fake_server *f;
    lc_cancel *tok;
} trigger_arg;

static void *trigger_on_frame(void *arg) {
    trigger_arg *t = arg;
    for (int i = 0; i < 10000 && !__atomic_load_n(&t->f->got_frame, __ATOMIC_ACQUIRE); i++) sleep_ms(1);
    lc_cancel_trigger(t->tok);
    return NULL;
}

/* lc_lock of "k" at the fake, cancelled through tok once the fake has the
 * whole frame. */
static lc_err lock_cancelled_once_sent(fake_server *f, lc_client *c, lc_cancel *tok) {
    pthread_t th;
    trigger_arg t = {.f = f, .tok = tok};
    pthread_create(&th, NULL, trigger_on_frame, &t);
    lc_err e = lc_lock(c, "k", 0, tok);
    pthread_join(th, NULL);
    return e;
}

static int test_fake_cancel_closes(void) {
    fake_server f;
    lc_client c;
    lc_cancel tok;
    CHECK_ERR(lc_cancel_init(&tok), LC_OK);
    CHECK(!lc_cancel_triggered(&tok));
    fake_start(&f, FAKE_HOLD, &c, NULL);
    CHECK_ERR(lock_cancelled_once_sent(&f, &c, &tok), LC_ERR_CANCELED);
    fake_stop(&f);
    CHECK(f.saw_eof);
    CHECK(!f.extra_conn);
    CHECK(lc_cancel_triggered(&tok));
    /* A triggered token fails at once, without connecting. */
    lc_client dead;
    dead_client(&dead, NULL);
    CHECK_ERR(lc_lock(&dead, "k", 0, &tok), LC_ERR_CANCELED);
    lc_cancel_reset(&tok);
    CHECK(!lc_cancel_triggered(&tok));
    CHECK_ERR(lc_lock(&dead, "k", 0, &tok), LC_ERR_UNREACHABLE);
    lc_cancel_destroy(&tok);
    return failures ? 1 : 0;
}

/* A lock gives up (timeout or token) while the server's '+' is on its way:
 * the client hangs up, the fake notices the EOF, and 150 ms later the grant
 * arrives. The call must return it (LC_OK: the caller holds the key) rather
 * than drop a key the server handed over. */
static int late_grant_case(bool by_cancel) {
    fake_server f;
    lc_client c;
    lc_cancel tok;
    CHECK_ERR(lc_cancel_init(&tok), LC_OK);
    fake_start(&f, FAKE_GRANT_AFTER_EOF, &c, NULL);
    lc_err e = by_cancel ? lock_cancelled_once_sent(&f, &c, &tok) : lc_lock(&c, "k", 150, NULL);
    fake_stop(&f);
    CHECK(f.saw_eof);
    CHECK(f.sent_grant);
    CHECK_ERR(e, LC_OK);
    CHECK(!f.extra_conn);
    lc_cancel_destroy(&tok);
    return failures ? 1 : 0;
}

static int test_late_grant_on_timeout(void) { return late_grant_case(false); }
static int test_late_grant_on_cancel(void) { return late_grant_case(true); }

/* ---- conformance against the real server ------------------------------ */

static int test_lock_unlock(void) {
    lc_client c;
    int rc = server(&c, "c-suite");
    if (rc) return rc;
    char key[128];
    unique_key(key, sizeof key, "lock-unlock");
    CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    CHECK_ERR(lc_unlock(&c, key), LC_ERR_REFUSED); /* not held any more */
    CHECK_ERR(lc_wait(&c, key, 5000, NULL), LC_OK);
    CHECK_ERR(lc_reset_key(&c, key), LC_OK);
    return failures ? 1 : 0;
}

static int count_calls;
static int count_fn(void *arg) {
    (void)arg;
    return ++count_calls;
}

static int test_trylock_held(void) {
    lc_client a, b;
    int rc = server(&a, "c-suite-a");
    if (rc) return rc;
    server(&b, "c-suite-b");
    char key[128];
    unique_key(key, sizeof key, "trylock");
    bool won = false;
    CHECK_ERR(lc_trylock(&a, key, &won), LC_OK);
    CHECK(won);
    CHECK_ERR(lc_trylock(&b, key, &won), LC_OK);
    CHECK(!won);
    int r = 0;
    CHECK_ERR(lc_with_trylock(&b, key, count_fn, NULL, &r), LC_ERR_NOT_WON);
    CHECK(count_calls == 0);
    CHECK_ERR(lc_unlock(&a, key), LC_OK);
    CHECK_ERR(lc_with_trylock(&b, key, count_fn, NULL, &r), LC_OK);
    CHECK(r == 1);
    CHECK_ERR(lc_with_lock(&b, key, 5000, NULL, count_fn, NULL, &r), LC_OK);
    CHECK(r == 2);
    /* Both scoped forms released the key. */
    CHECK_ERR(lc_trylock(&a, key, &won), LC_OK);
    CHECK(won);
    CHECK_ERR(lc_unlock(&a, key), LC_OK);
    return failures ? 1 : 0;
}

static int test_fifo(void) {
    lc_client c;
    int rc = server(&c, "c-suite-fifo");
    if (rc) return rc;
    char key[128];
    unique_key(key, sizeof key, "fifo");
    CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
    int order[3], order_n = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    waiter w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (waiter){.c = &c, .key = key, .timeout_ms = 10000, .hold_ms = 20,
                        .order = order, .order_n = &order_n, .mu = &mu, .id = i};
        pthread_create(&w[i].th, NULL, waiter_run, &w[i]);
        let_queue(key, i + 1);
    }
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    for (int i = 0; i < 3; i++) {
        pthread_join(w[i].th, NULL);
        CHECK_ERR(w[i].result, LC_OK);
    }
    CHECK(order_n == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2);
    pthread_mutex_destroy(&mu);
    return failures ? 1 : 0;
}

/* Holder holds key; a waiter gives up (timeout or token); the web API shows
 * the queue empty again, and after the unlock the key is free (nobody was
 * handed it behind our back). */
static int withdraw_case(const char *name, bool by_cancel) {
    lc_client c;
    int rc = server(&c, "c-suite-withdraw");
    if (rc) return rc;
    char key[128];
    unique_key(key, sizeof key, name);
    CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
    lc_cancel tok;
    lc_cancel_init(&tok);
    int64_t t0 = now_ms();
    if (by_cancel) {
        pthread_t th;
        waiter w = {.c = &c, .key = key, .cancel = &tok};
        pthread_create(&w.th, NULL, waiter_run, &w);
        let_queue(key, 1);
        pthread_create(&th, NULL, trigger_later, &tok);
        pthread_join(th, NULL);
        pthread_join(w.th, NULL);
        CHECK_ERR(w.result, LC_ERR_CANCELED);
    } else {
        CHECK_ERR(lc_lock(&c, key, 300, NULL), LC_ERR_TIMEOUT);
        CHECK(now_ms() - t0 >= 300);
    }
    int q = -1;
    int64_t end = now_ms() + 5000;
    while ((q = queue_length(key)) != 0 && now_ms() < end) sleep_ms(20);
    if (q != 0) {
        fprintf(stderr, "  queue of %s did not become empty (web API gave %d)\n", key, q);
        failures++;
    }
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    bool won = false;
    CHECK_ERR(lc_trylock(&c, key, &won), LC_OK);
    CHECK(won);
    lc_unlock(&c, key);
    lc_cancel_destroy(&tok);
    return failures ? 1 : 0;
}

static int test_timeout_withdraws(void) { return withdraw_case("timeout", false); }
static int test_cancel_withdraws(void) { return withdraw_case("cancel", true); }

static int test_reset_while_waiting(void) {
    lc_client a, b;
    int rc = server(&a, "c-suite-holder");
    if (rc) return rc;
    char src[64];
    snprintf(src, sizeof src, "c-suite-waiter-%s", run_id);
    server(&b, src);
    char key[128];

    /* ResetByKey fails the waiter. */
    unique_key(key, sizeof key, "reset-key");
    CHECK_ERR(lc_lock(&a, key, 5000, NULL), LC_OK);
    waiter w = {.c = &b, .key = key, .timeout_ms = 10000};
    pthread_create(&w.th, NULL, waiter_run, &w);
    let_queue(key, 1);
    CHECK_ERR(lc_reset_key(&a, key), LC_OK);
    pthread_join(w.th, NULL);
    CHECK_ERR(w.result, LC_ERR_RESET);
    CHECK_ERR(lc_unlock(&a, key), LC_ERR_REFUSED); /* the reset dropped the holder */

    /* ResetBySource fails that source's waiter; the holder keeps its key. */
    unique_key(key, sizeof key, "reset-source");
    CHECK_ERR(lc_lock(&a, key, 5000, NULL), LC_OK);
    waiter w2 = {.c = &b, .key = key, .timeout_ms = 10000};
    pthread_create(&w2.th, NULL, waiter_run, &w2);
    let_queue(key, 1);
    CHECK_ERR(lc_reset_source(&a, src), LC_OK);
    pthread_join(w2.th, NULL);
    CHECK_ERR(w2.result, LC_ERR_RESET);
    CHECK_ERR(lc_unlock(&a, key), LC_OK);

    /* ResetBySource with NULL: the client's own source releases its keys. */
    unique_key(key, sizeof key, "reset-own");
    CHECK_ERR(lc_lock(&b, key, 5000, NULL), LC_OK);
    CHECK_ERR(lc_reset_source(&b, NULL), LC_OK);
    CHECK_ERR(lc_unlock(&b, key), LC_ERR_REFUSED);
    return failures ? 1 : 0;
}

static int test_wait(void) {
    lc_client c;
    int rc = server(&c, "c-suite-wait");
    if (rc) return rc;
    char key[128];
    unique_key(key, sizeof key, "wait");
    CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
    waiter w = {.c = &c, .key = key, .timeout_ms = 10000, .wait_only = 1};
    pthread_create(&w.th, NULL, waiter_run, &w);
    let_queue(key, 1);
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    pthread_join(w.th, NULL);
    CHECK_ERR(w.result, LC_OK);
    bool won = false;
    CHECK_ERR(lc_trylock(&c, key, &won), LC_OK); /* the wait released it */
    CHECK(won);
    lc_unlock(&c, key);
    return failures ? 1 : 0;
}

static int test_utf8_key(void) {
    lc_client c;
    int rc = server(&c, "h\xc3\xb4te-\xce\xb2");
    if (rc) return rc;
    char key[128];
    unique_key(key, sizeof key, "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87");
    CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    return failures ? 1 : 0;
}

/* ---- runner ----------------------------------------------------------- */

static const struct {
    const char *name;
    int (*fn)(void);
} tests[] = {
    {"vector_frames", test_vector_frames},
    {"vector_invalid", test_vector_invalid},
    {"vector_answers", test_vector_answers},
    {"address", test_address},
    {"overlong_key_before_connect", test_overlong_key_before_connect},
    {"connect_timeout", test_connect_timeout},
    {"closed_without_answer", test_fake_closed_without_answer},
    {"timeout_closes_socket", test_fake_timeout_closes},
    {"give_up_grace_bounded", test_fake_give_up_grace_bounded},
    {"cancel_closes_socket", test_fake_cancel_closes},
    {"late_grant_on_timeout", test_late_grant_on_timeout},
    {"late_grant_on_cancel", test_late_grant_on_cancel},
    {"lock_unlock", test_lock_unlock},
    {"trylock_held", test_trylock_held},
    {"fifo", test_fifo},
    {"timeout_withdraws", test_timeout_withdraws},
    {"cancel_withdraws", test_cancel_withdraws},
    {"reset_while_waiting", test_reset_while_waiting},
    {"wait", test_wait},
    {"utf8_key", test_utf8_key},
};

int main(int argc, char **argv) {
    const char *rid = getenv("LC_TEST_RUN_ID");
    if (rid && rid[0]) snprintf(run_id, sizeof run_id, "%s", rid);
    else snprintf(run_id, sizeof run_id, "%ld-%ld", (long)getpid(), (long)(now_ms() % 1000000));
    /* The three tables, one after the other. */
    const test_case *tables[3] = {NULL, session_tests, cluster_tests};
    size_t counts[3] = {sizeof tests / sizeof tests[0], session_test_count, cluster_test_count};
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t t = 0; t < 3; t++) {
            for (size_t i = 0; i < counts[t]; i++) puts(t == 0 ? tests[i].name : tables[t][i].name);
        }
        return 0;
    }
    int passed = 0, failed = 0, skipped = 0;
    for (size_t t = 0; t < 3; t++) {
        for (size_t i = 0; i < counts[t]; i++) {
            const char *name = t == 0 ? tests[i].name : tables[t][i].name;
            int (*fn)(void) = t == 0 ? tests[i].fn : tables[t][i].fn;
            if (argc > 1 && strcmp(argv[1], name) != 0) continue;
            failures = 0;
            int rc = fn();
            if (rc == 0 && failures) rc = 1;
            printf("%-4s %s\n", rc == 0 ? "ok" : rc == SKIP ? "skip" : "FAIL", name);
            if (rc == 0) passed++;
            else if (rc == SKIP) skipped++;
            else failed++;
            if (argc > 1) return rc;
        }
    }
    if (argc > 1) {
        fprintf(stderr, "no test named %s\n", argv[1]);
        return 2;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
