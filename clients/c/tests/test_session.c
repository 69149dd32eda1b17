/*
 * test_session.c - tests of the C client's sessions.
 *
 * Vector tests read $LC_VECTORS. Conformance tests talk to the real server at
 * $LC_TEST_ADDRESS (web port $LC_TEST_WEB_ADDRESS) and skip without it; the
 * restart and expiry tests start servers of their own from $LC_SERVER_BIN on
 * free loopback ports. Fake-server tests run a one-connection session server
 * in a thread, for what a real server cannot be made to do on demand (a
 * grant that crosses a Cancel).
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- helpers ---------------------------------------------------------- */

static uint64_t dec64(const json *v) { return v && v->str ? strtoull(v->str, NULL, 10) : 0; }

static bool same_hex(const uint8_t *got, size_t glen, const char *hex) {
    uint8_t want[512];
    size_t wlen = hex_decode(hex, want, sizeof want);
    return glen == wlen && memcmp(got, want, wlen) == 0;
}

/* One HTTP/1.0 request to web (host:port); the status, the body in out. */
int http(const char *web, const char *method, const char *path, char *out, size_t cap) {
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
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\n\r\n",
                     method, path, web);
    if (send(fd, req, (size_t)n, 0) != n) {
        close(fd);
        return -1;
    }
    char resp[65536];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof resp - 1 && (r = recv(fd, resp + got, sizeof resp - 1 - got, 0)) > 0) got += (size_t)r;
    close(fd);
    resp[got] = '\0';
    int status = 0;
    if (sscanf(resp, "HTTP/%*s %d", &status) != 1) return -1;
    const char *body = strstr(resp, "\r\n\r\n");
    if (out && cap) snprintf(out, cap, "%s", body ? body + 4 : "");
    return status;
}

static const char *server_address(void) {
    const char *a = getenv("LC_TEST_ADDRESS");
    if (a == NULL || a[0] == '\0') {
        fprintf(stderr, "  LC_TEST_ADDRESS not set: skipped\n");
        return NULL;
    }
    return a;
}

static lc_err open_at(const char *address, uint32_t ttl_ms, const char *source, lc_session **s) {
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = address;
    o.ttl_ms = ttl_ms;
    o.source = source;
    return lc_session_open(&o, s);
}

/* Counts on_lost calls. */
typedef struct {
    pthread_mutex_t mu;
    int calls;
    lc_err why;
} lost_seen;

static void on_lost(lc_session *s, lc_err why, void *arg) {
    lost_seen *l = arg;
    (void)s;
    pthread_mutex_lock(&l->mu);
    l->calls++;
    l->why = why;
    pthread_mutex_unlock(&l->mu);
}

static int lost_calls(lost_seen *l) {
    pthread_mutex_lock(&l->mu);
    int n = l->calls;
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* A Lock in a thread. */
typedef struct {
    lc_session *s;
    const char *key;
    int timeout_ms;
    lc_cancel *cancel;
    lc_err result;
    uint64_t token;
    int id;
    int *order, *order_n;
    pthread_mutex_t *mu;
    int64_t granted_at;
    pthread_t th;
} locker;

static void *locker_run(void *arg) {
    locker *l = arg;
    l->result = lc_session_lock(l->s, l->key, l->timeout_ms, l->cancel, &l->token);
    l->granted_at = now_ms();
    if (l->result == LC_OK && l->order) {
        pthread_mutex_lock(l->mu);
        l->order[(*l->order_n)++] = l->id;
        pthread_mutex_unlock(l->mu);
        lc_session_unlock(l->s, l->key, l->token);
    }
    return NULL;
}

/* Polls GET /api/v1/keys/KEY on web until its queue has want waiters. */
static bool wait_queue_at(const char *web, const char *key, int want, int timeout_ms) {
    char path[256], body[8192];
    snprintf(path, sizeof path, "/api/v1/keys/%s", key);
    int64_t end = now_ms() + timeout_ms;
    do {
        if (http(web, "GET", path, body, sizeof body) == 200) {
            const char *w = strstr(body, "\"waiters\":");
            if (w && atoi(w + 10) == want) return true;
        }
        sleep_ms(20);
    } while (now_ms() < end);
    return false;
}

/* ---- own servers ------------------------------------------------------- */

typedef struct {
    pid_t pid;
    char addr[64], web[64];
    int port, web_port;
    const char *auth; /* AUTH_TOKEN, or NULL */
} own_server;

/* Starts $LC_SERVER_BIN on free ports (or srv's ports when already set),
 * with DATA_PATH data (NULL: none), and waits for /readyz. 0, SKIP or 1. */
static int server_start(own_server *srv, const char *data) {
    const char *bin = getenv("LC_SERVER_BIN");
    if (bin == NULL || bin[0] == '\0') {
        fprintf(stderr, "  LC_SERVER_BIN not set: skipped\n");
        return SKIP;
    }
    if (srv->port == 0) {
        srv->port = dead_port();
        srv->web_port = dead_port();
        while (srv->web_port == srv->port) srv->web_port = dead_port();
    }
    snprintf(srv->addr, sizeof srv->addr, "127.0.0.1:%d", srv->port);
    snprintf(srv->web, sizeof srv->web, "127.0.0.1:%d", srv->web_port);
    char e_bind[96], e_web[96], e_data[320], e_auth[160];
    snprintf(e_bind, sizeof e_bind, "BIND_ADDRESS=%s", srv->addr);
    snprintf(e_web, sizeof e_web, "WEB_ADDRESS=%s", srv->web);
    snprintf(e_data, sizeof e_data, "DATA_PATH=%s", data ? data : "");
    snprintf(e_auth, sizeof e_auth, "AUTH_TOKEN=%s", srv->auth ? srv->auth : "");
    char *envp[4] = {e_bind, e_web, NULL, NULL};
    if (data) envp[2] = e_data;
    if (srv->auth) envp[data ? 3 : 2] = e_auth;
    char *envfull[5] = {envp[0], envp[1], envp[2], envp[3], NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)bin, NULL};
    int rc = posix_spawn(&srv->pid, bin, &fa, NULL, argv, envfull);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "  cannot start %s: %s\n", bin, strerror(rc));
        return 1;
    }
    int64_t end = now_ms() + 10000;
    while (now_ms() < end) {
        if (http(srv->web, "GET", "/readyz", NULL, 0) == 200) return 0;
        int st;
        if (waitpid(srv->pid, &st, WNOHANG) == srv->pid) {
            fprintf(stderr, "  server exited at start\n");
            srv->pid = 0;
            return 1;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "  server not ready within 10 s\n");
    return 1;
}

/* SIGTERM, then waits for the exit. */
static void server_stop(own_server *srv) {
    if (srv->pid <= 0) return;
    kill(srv->pid, SIGTERM);
    int st;
    waitpid(srv->pid, &st, 0);
    srv->pid = 0;
}

/* ---- a fake session server -------------------------------------------- */

/* Accepts one connection, answers the open '+' (TTL 60 s), then reads
 * requests: records them, answers Ping, and for the cancel-crossing script
 * answers a Lock only when its Cancel comes, with '+' and token 77, and an
 * Unlock '+' with its token. */
typedef struct {
    int lfd;
    char addr[64];
    pthread_mutex_t mu; /* guards the fields below */
    int requests;       /* requests other than Ping */
    uint8_t last_action;
    uint64_t unlock_token;
    int unlocks;
    int cancels;
    pthread_t th;
} fake_session;

static bool read_full(int fd, uint8_t *b, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, b + got, n - got, 0);
        if (r <= 0) return false;
        got += (size_t)r;
    }
    return true;
}

static void answer(int fd, uint32_t id, uint8_t status, uint64_t token) {
    uint8_t b[13] = {(uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id, status};
    for (int i = 0; i < 8; i++) b[5 + i] = (uint8_t)(token >> (56 - 8 * i));
    send(fd, b, sizeof b, MSG_NOSIGNAL);
}

static void *fake_session_run(void *arg) {
    fake_session *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    uint8_t open[270];
    if (!read_full(fd, open, 15) || !read_full(fd, open + 15, (size_t)open[14] + 1) ||
        !read_full(fd, open + 16 + open[14], open[15 + open[14]])) {
        close(fd);
        return NULL;
    }
    uint8_t ok[13] = {'+', 0, 0, 0xea, 0x60, 0, 0, 0, 0, 0, 0, 0, 42};
    send(fd, ok, sizeof ok, MSG_NOSIGNAL);
    uint8_t h[14], key[128];
    while (read_full(fd, h, 14) && read_full(fd, key, h[13])) {
        uint32_t id = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
        uint64_t tok = 0;
        for (int i = 0; i < 8; i++) tok = tok << 8 | h[5 + i];
        pthread_mutex_lock(&f->mu);
        if (h[0] != LC_ACTION_PING) {
            f->requests++;
            f->last_action = h[0];
        }
        if (h[0] == LC_ACTION_CANCEL) f->cancels++;
        if (h[0] == LC_ACTION_UNLOCK) {
            f->unlocks++;
            f->unlock_token = tok;
        }
        pthread_mutex_unlock(&f->mu);
        switch (h[0]) {
        case LC_ACTION_PING: answer(fd, id, '+', 0); break;
        case LC_ACTION_CANCEL: answer(fd, id, '+', 77); break; /* the grant crossed it */
        case LC_ACTION_UNLOCK: answer(fd, id, '+', tok); break;
        case LC_ACTION_CLOSE: answer(fd, id, '+', 0); shutdown(fd, SHUT_WR); break;
        case LC_ACTION_LOCK: break; /* waits */
        default: answer(fd, id, '-', 0);
        }
    }
    close(fd);
    return NULL;
}

static void fake_session_start(fake_session *f) {
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(f->lfd, (struct sockaddr *)&a, sizeof a);
    listen(f->lfd, 4);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    snprintf(f->addr, sizeof f->addr, "127.0.0.1:%d", ntohs(a.sin_port));
    pthread_create(&f->th, NULL, fake_session_run, f);
}

static void fake_session_stop(fake_session *f) {
    pthread_join(f->th, NULL);
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
}

/* A server that opens a session with a TTL of 1 s and then answers nothing
 * (not even Ping), and refuses the resume that follows: the session must
 * notice the silence (a Ping unanswered for a third of the TTL), drop the
 * connection, try to resume, and report the loss. */
typedef struct {
    int lfd;
    char addr[64];
    int64_t dropped_at; /* when the client closed the silent connection */
    pthread_t th;
} silent_server;

static void *silent_run(void *arg) {
    silent_server *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    uint8_t open[270];
    if (read_full(fd, open, 15) && read_full(fd, open + 15, (size_t)open[14] + 1) &&
        read_full(fd, open + 16 + open[14], open[15 + open[14]])) {
        uint8_t ok[13] = {'+', 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0, 0, 0, 7};
        send(fd, ok, sizeof ok, MSG_NOSIGNAL);
        uint8_t b[256];
        while (recv(fd, b, sizeof b, 0) > 0) {
        }
        f->dropped_at = now_ms();
    }
    close(fd);
    fd = accept(f->lfd, NULL, NULL); /* the resume */
    if (fd >= 0) {
        uint8_t no[13] = {'-'};
        read_full(fd, open, 16);
        send(fd, no, sizeof no, MSG_NOSIGNAL);
        close(fd);
    }
    return NULL;
}

static int test_session_silent_server_dropped(void) {
    silent_server f = {0};
    f.lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(f.lfd, (struct sockaddr *)&a, sizeof a);
    listen(f.lfd, 4);
    getsockname(f.lfd, (struct sockaddr *)&a, &al);
    snprintf(f.addr, sizeof f.addr, "127.0.0.1:%d", ntohs(a.sin_port));
    pthread_create(&f.th, NULL, silent_run, &f);
    lc_session *s = NULL;
    int64_t t0 = now_ms();
    CHECK_ERR(open_at(f.addr, 0, NULL, &s), LC_OK);
    if (!s) return 1;
    CHECK(lc_session_ttl_ms(s) == 1000);
    CHECK_ERR(lc_session_wait_end(s, 5000), LC_ERR_SESSION_LOST);
    pthread_join(f.th, NULL);
    close(f.lfd);
    int64_t dropped = f.dropped_at - t0;
    fprintf(stderr, "  silent connection dropped after %lld ms (TTL 1000 ms)\n", (long long)dropped);
    CHECK(dropped >= 600 && dropped <= 900); /* Ping at 1/3 TTL, given up 1/3 later */
    CHECK_ERR(lc_session_close(s, 1000), LC_ERR_SESSION_LOST);
    return failures ? 1 : 0;
}

/* ---- vectors ----------------------------------------------------------- */

static int test_session_vector_open(void) {
    json *v = load_vectors();
    if (!v) return 1;
    const json *opens = json_get(v, "session_open");
    CHECK(opens && opens->n > 0);
    for (size_t i = 0; opens && i < opens->n; i++) {
        const json *e = &opens->items[i];
        uint8_t buf[LC_SESSION_OPEN_MAX];
        size_t len = 0;
        lc_err err = lc_session_encode_open(buf, sizeof buf, &len, (uint8_t)json_get(e, "version")->num,
                                            (uint32_t)json_get(e, "ttl_ms")->num,
                                            dec64(json_get(e, "resume")), json_get(e, "source")->str,
                                            json_get(e, "auth")->str);
        if (err != LC_OK || !same_hex(buf, len, json_get(e, "hex")->str)) {
            fprintf(stderr, "  open \"%s\": encoded differently\n", json_get(e, "name")->str);
            failures++;
        }
    }
    const json *inv = json_get(v, "session_open_invalid");
    CHECK(inv && inv->n > 0);
    for (size_t i = 0; inv && i < inv->n; i++) {
        const json *e = &inv->items[i];
        uint8_t buf[LC_SESSION_OPEN_MAX * 2];
        size_t len = 0;
        CHECK_ERR(lc_session_encode_open(buf, sizeof buf, &len, 1, (uint32_t)json_get(e, "ttl_ms")->num,
                                         dec64(json_get(e, "resume")), json_get(e, "source")->str,
                                         json_get(e, "auth")->str),
                  LC_ERR_INVALID);
        /* lc_session_open refuses it before connecting: against an address
         * nothing listens on it says invalid, not unreachable. */
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", dead_port());
        lc_session_options o;
        lc_session_options_init(&o);
        o.address = addr;
        o.source = json_get(e, "source")->str;
        o.auth = json_get(e, "auth")->str;
        lc_session *s = NULL;
        CHECK_ERR(lc_session_open(&o, &s), LC_ERR_INVALID);
        CHECK(s == NULL);
    }
    const json *ans = json_get(v, "session_open_answers");
    CHECK(ans && ans->n > 0);
    for (size_t i = 0; ans && i < ans->n; i++) {
        const json *e = &ans->items[i];
        uint8_t b[LC_SESSION_OPEN_ANSWER_SIZE];
        CHECK(hex_decode(json_get(e, "hex")->str, b, sizeof b) == sizeof b);
        uint8_t status;
        uint32_t ttl;
        uint64_t id;
        lc_session_decode_open_answer(b, &status, &ttl, &id);
        CHECK(status == (uint8_t)json_get(e, "status")->str[0]);
        CHECK(ttl == (uint32_t)json_get(e, "ttl_ms")->num);
        CHECK(id == dec64(json_get(e, "session")));
    }
    json_free(v);
    return failures ? 1 : 0;
}

static int test_session_vector_requests(void) {
    json *v = load_vectors();
    if (!v) return 1;
    const json *acts = json_get(v, "session_actions");
    CHECK(acts && json_get(acts, "open")->num == LC_ACTION_OPEN);
    CHECK(acts && json_get(acts, "lock")->num == LC_ACTION_LOCK);
    CHECK(acts && json_get(acts, "unlock")->num == LC_ACTION_UNLOCK);
    CHECK(acts && json_get(acts, "reset_by_key")->num == LC_ACTION_RESET_BY_KEY);
    CHECK(acts && json_get(acts, "reset_by_source")->num == LC_ACTION_RESET_BY_SOURCE);
    CHECK(acts && json_get(acts, "trylock")->num == LC_ACTION_TRYLOCK);
    CHECK(acts && json_get(acts, "cancel")->num == LC_ACTION_CANCEL);
    CHECK(acts && json_get(acts, "ping")->num == LC_ACTION_PING);
    CHECK(acts && json_get(acts, "close")->num == LC_ACTION_CLOSE);
    const json *reqs = json_get(v, "session_requests");
    CHECK(reqs && reqs->n > 0);
    for (size_t i = 0; reqs && i < reqs->n; i++) {
        const json *e = &reqs->items[i];
        uint8_t buf[LC_SESSION_REQUEST_MAX];
        size_t len = 0;
        lc_err err = lc_session_encode_request(buf, sizeof buf, &len, (int)json_get(e, "action")->num,
                                               (uint32_t)json_get(e, "id")->num,
                                               dec64(json_get(e, "token")), json_get(e, "key")->str);
        if (err != LC_OK || !same_hex(buf, len, json_get(e, "hex")->str)) {
            fprintf(stderr, "  request \"%s\": encoded differently\n", json_get(e, "name")->str);
            failures++;
        }
    }
    const json *ans = json_get(v, "session_answers");
    CHECK(ans && ans->n > 0);
    for (size_t i = 0; ans && i < ans->n; i++) {
        const json *e = &ans->items[i];
        uint8_t b[LC_SESSION_ANSWER_SIZE];
        CHECK(hex_decode(json_get(e, "hex")->str, b, sizeof b) == sizeof b);
        uint32_t id;
        uint8_t status;
        uint64_t token;
        lc_session_decode_answer(b, &id, &status, &token);
        CHECK(id == (uint32_t)json_get(e, "id")->num);
        CHECK(status == (uint8_t)json_get(e, "status")->str[0]);
        CHECK(token == dec64(json_get(e, "token")));
    }
    json_free(v);
    return failures ? 1 : 0;
}

/* Every session_invalid entry is refused by the encoder and by the public
 * call, and the public call sends nothing (a fake session server counts). */
static int test_session_vector_invalid(void) {
    json *v = load_vectors();
    if (!v) return 1;
    fake_session f;
    fake_session_start(&f);
    lc_session *s = NULL;
    CHECK_ERR(open_at(f.addr, 0, NULL, &s), LC_OK);
    const json *inv = json_get(v, "session_invalid");
    CHECK(inv && inv->n > 0);
    for (size_t i = 0; s && inv && i < inv->n; i++) {
        const json *e = &inv->items[i];
        int action = (int)json_get(e, "action")->num;
        const char *key = json_get(e, "key")->str;
        uint8_t buf[LC_SESSION_REQUEST_MAX * 2];
        size_t len;
        if (lc_session_encode_request(buf, sizeof buf, &len, action, 1, dec64(json_get(e, "token")),
                                      key) != LC_ERR_INVALID) {
            fprintf(stderr, "  invalid \"%s\": encoder accepted it\n", json_get(e, "name")->str);
            failures++;
        }
        uint64_t tok;
        lc_err got = LC_ERR_PROTOCOL;
        switch (action) {
        case LC_ACTION_LOCK: got = lc_session_lock(s, key, 1000, NULL, &tok); break;
        case LC_ACTION_TRYLOCK: got = lc_session_trylock(s, key, &tok); break;
        case LC_ACTION_UNLOCK: got = lc_session_unlock(s, key, dec64(json_get(e, "token"))); break;
        case LC_ACTION_RESET_BY_KEY: got = lc_session_reset_key(s, key); break;
        case LC_ACTION_RESET_BY_SOURCE: got = lc_session_reset_source(s, key); break;
        }
        if (got != LC_ERR_INVALID) {
            fprintf(stderr, "  invalid \"%s\": call gave \"%s\"\n", json_get(e, "name")->str, lc_strerror(got));
            failures++;
        }
    }
    CHECK_ERR(lc_session_close(s, 2000), LC_OK);
    fake_session_stop(&f);
    CHECK(f.requests == 1 && f.last_action == LC_ACTION_CLOSE); /* nothing but the Close */
    json_free(v);
    return failures ? 1 : 0;
}

/* The original server's frames are answered by the real server at once. */
static int test_original_frames(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    json *v = load_vectors();
    if (!v) return 1;
    lc_client c;
    CHECK_ERR(lc_client_init(&c, addr, NULL), LC_OK);
    const json *fr = json_get(v, "original_frames");
    CHECK(fr && fr->n > 0);
    for (size_t i = 0; fr && i < fr->n; i++) {
        const json *e = &fr->items[i];
        int action = (int)json_get(e, "action")->num;
        const char *key = json_get(e, "key")->str;
        if (action == LC_ACTION_UNLOCK) CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
        uint8_t frame[300];
        size_t len = hex_decode(json_get(e, "hex")->str, frame, sizeof frame);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(c.port))};
        inet_pton(AF_INET, strcmp(c.host, "localhost") == 0 ? "127.0.0.1" : c.host, &a.sin_addr);
        CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
        CHECK(send(fd, frame, len, 0) == (ssize_t)len);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint8_t b = 0;
        bool answered = poll(&p, 1, 3000) == 1 && recv(fd, &b, 1, 0) == 1;
        if (!answered || b != '+') {
            fprintf(stderr, "  original frame \"%s\": answer %c\n", json_get(e, "name")->str,
                    answered ? b : '?');
            failures++;
        }
        close(fd);
    }
    json_free(v);
    return failures ? 1 : 0;
}

/* ---- against the real server ------------------------------------------ */

static int test_session_basics(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    lc_session *s = NULL, *t = NULL;
    CHECK_ERR(open_at(addr, 5000, "c-session", &s), LC_OK);
    CHECK_ERR(open_at(addr, 0, NULL, &t), LC_OK);
    if (!s || !t) return 1;
    CHECK(lc_session_id(s) != 0 && lc_session_id(s) != lc_session_id(t));
    CHECK(lc_session_ttl_ms(s) == 5000);
    CHECK(lc_session_ttl_ms(t) >= 1000);
    CHECK_ERR(lc_session_state(s), LC_OK);
    CHECK(lc_session_connected(s));
    char key[128];
    unique_key(key, sizeof key, "session-basics");
    uint64_t t1 = 0, t2 = 0, x = 0;
    CHECK_ERR(lc_session_lock(s, key, 5000, NULL, &t1), LC_OK);
    CHECK(t1 != 0);
    CHECK_ERR(lc_session_trylock(s, key, &x), LC_ERR_NOT_WON); /* itself included */
    CHECK(x == 0);
    CHECK_ERR(lc_session_trylock(t, key, &x), LC_ERR_NOT_WON);
    CHECK_ERR(lc_session_unlock(t, key, 0), LC_ERR_NOT_HELD); /* not its grant */
    CHECK_ERR(lc_session_unlock(s, key, t1 + 1), LC_ERR_NOT_HELD);

    /* The web API shows the hold, its token and its session. */
    char path[256], body[65536], want[64];
    snprintf(path, sizeof path, "/api/v1/keys/%s", key);
    if (getenv("LC_TEST_WEB_ADDRESS")) {
        CHECK(http(getenv("LC_TEST_WEB_ADDRESS"), "GET", path, body, sizeof body) == 200);
        snprintf(want, sizeof want, "\"token\":%" PRIu64, t1);
        CHECK(strstr(body, want) != NULL);
        snprintf(want, sizeof want, "\"session\":\"%016" PRIx64 "\"", lc_session_id(s));
        CHECK(strstr(body, want) != NULL);
    }
    CHECK_ERR(lc_session_unlock(s, key, t1), LC_OK);
    CHECK_ERR(lc_session_unlock(s, key, t1), LC_ERR_NOT_HELD); /* a stale token releases nothing */
    CHECK_ERR(lc_session_trylock(t, key, &t2), LC_OK);
    CHECK(t2 > t1);
    CHECK_ERR(lc_session_unlock(t, key, 0), LC_OK); /* token 0: whatever it holds on key */

    /* Tokens grow strictly, across sessions and keys. */
    uint64_t last = t2;
    for (int i = 0; i < 20; i++) {
        char k[160];
        snprintf(k, sizeof k, "%s-%d", key, i % 3);
        lc_session *who = i % 2 ? s : t;
        uint64_t tok = 0;
        CHECK_ERR(lc_session_lock(who, k, 5000, NULL, &tok), LC_OK);
        if (tok <= last) {
            fprintf(stderr, "  token %" PRIu64 " after %" PRIu64 "\n", tok, last);
            failures++;
        }
        last = tok;
        CHECK_ERR(lc_session_unlock(who, k, tok), LC_OK);
    }

    /* Resets through a session. */
    CHECK_ERR(lc_session_lock(t, key, 5000, NULL, &x), LC_OK);
    CHECK_ERR(lc_session_reset_key(s, key), LC_OK);
    CHECK_ERR(lc_session_unlock(t, key, x), LC_ERR_NOT_HELD);
    CHECK_ERR(lc_session_lock(s, key, 5000, NULL, &x), LC_OK);
    CHECK_ERR(lc_session_reset_source(t, "c-session"), LC_OK);
    CHECK_ERR(lc_session_unlock(s, key, x), LC_ERR_NOT_HELD);
    CHECK_ERR(lc_session_state(s), LC_OK); /* the session stays open */

    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    CHECK_ERR(lc_session_close(t, 5000), LC_OK);
    return failures ? 1 : 0;
}

/* Many threads on one session: distinct keys and one shared key, answered
 * by id; the shared key is held by one thread at a time. */
typedef struct {
    lc_session *s;
    const char *shared;
    int idx;
    int *inside;
    int max_inside;
    lc_err err;
    pthread_t th;
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    char own[200];
    for (int i = 0; i < 25 && w->err == LC_OK; i++) {
        uint64_t a = 0, b = 0;
        snprintf(own, sizeof own, "%s-own-%d", w->shared, w->idx);
        lc_err e = lc_session_lock(w->s, own, 10000, NULL, &a);
        if (e == LC_OK) e = lc_session_lock(w->s, w->shared, 10000, NULL, &b);
        if (e != LC_OK) {
            w->err = e;
            break;
        }
        int n = __atomic_add_fetch(w->inside, 1, __ATOMIC_SEQ_CST);
        if (n > w->max_inside) w->max_inside = n;
        __atomic_sub_fetch(w->inside, 1, __ATOMIC_SEQ_CST);
        if (b <= a) w->err = LC_ERR_PROTOCOL; /* granted later, larger token */
        e = lc_session_unlock(w->s, w->shared, b);
        if (e == LC_OK) e = lc_session_unlock(w->s, own, a);
        if (e != LC_OK) w->err = e;
    }
    return NULL;
}

static int test_session_threads(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    lc_session *s = NULL;
    CHECK_ERR(open_at(addr, 10000, "c-threads", &s), LC_OK);
    if (!s) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-threads");
    int inside = 0;
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){.s = s, .shared = key, .idx = i, .inside = &inside};
        pthread_create(&w[i].th, NULL, worker_run, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(w[i].th, NULL);
        CHECK_ERR(w[i].err, LC_OK);
        CHECK(w[i].max_inside == 1);
    }
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    return failures ? 1 : 0;
}

static int test_session_fifo(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) {
        fprintf(stderr, "  LC_TEST_WEB_ADDRESS needed: skipped\n");
        return SKIP;
    }
    lc_session *a = NULL, *b = NULL;
    CHECK_ERR(open_at(addr, 10000, "c-fifo-a", &a), LC_OK);
    CHECK_ERR(open_at(addr, 10000, "c-fifo-b", &b), LC_OK);
    if (!a || !b) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-fifo");
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(a, key, 5000, NULL, &tok), LC_OK);
    int order[4], order_n = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    /* Waiters from b, a, b, a in that order: granted in that order. */
    locker l[4];
    for (int i = 0; i < 4; i++) {
        l[i] = (locker){.s = i % 2 ? a : b, .key = key, .timeout_ms = 15000, .id = i,
                        .order = order, .order_n = &order_n, .mu = &mu};
        pthread_create(&l[i].th, NULL, locker_run, &l[i]);
        CHECK(wait_queue(key, i + 1, 5000));
    }
    CHECK_ERR(lc_session_unlock(a, key, tok), LC_OK);
    uint64_t last = tok;
    for (int i = 0; i < 4; i++) {
        pthread_join(l[i].th, NULL);
        CHECK_ERR(l[i].result, LC_OK);
        CHECK(l[i].token > last);
        last = l[i].token;
    }
    CHECK(order_n == 4);
    for (int i = 0; i < order_n; i++) CHECK(order[i] == i);
    CHECK_ERR(lc_session_close(a, 5000), LC_OK);
    CHECK_ERR(lc_session_close(b, 5000), LC_OK);
    return failures ? 1 : 0;
}

/* Waits until key's queue is empty in the web API. */
static bool queue_empties(const char *key) { return wait_queue(key, 0, 5000); }

static void *trigger_when_queued(void *arg) {
    void **a = arg;
    wait_queue(a[0], 1, 5000);
    lc_cancel_trigger(a[1]);
    return NULL;
}

static int test_session_cancel_withdraws(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) {
        fprintf(stderr, "  LC_TEST_WEB_ADDRESS needed: skipped\n");
        return SKIP;
    }
    lc_session *a = NULL, *b = NULL;
    CHECK_ERR(open_at(addr, 10000, "c-cancel-a", &a), LC_OK);
    CHECK_ERR(open_at(addr, 10000, "c-cancel-b", &b), LC_OK);
    if (!a || !b) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-cancel");
    uint64_t tok = 0, x = 0;
    CHECK_ERR(lc_session_lock(a, key, 5000, NULL, &tok), LC_OK);

    /* Cancel token: the waiter is withdrawn; the session stays. */
    lc_cancel c;
    CHECK_ERR(lc_cancel_init(&c), LC_OK);
    void *args[2] = {key, &c};
    pthread_t th;
    pthread_create(&th, NULL, trigger_when_queued, args);
    CHECK_ERR(lc_session_lock(b, key, 0, &c, &x), LC_ERR_CANCELED);
    pthread_join(th, NULL);
    CHECK(x == 0);
    CHECK(queue_empties(key));
    CHECK_ERR(lc_session_lock(b, key, 0, &c, &x), LC_ERR_CANCELED); /* still triggered */
    lc_cancel_destroy(&c);

    /* Timeout: the same. */
    int64_t t0 = now_ms();
    CHECK_ERR(lc_session_lock(b, key, 300, NULL, &x), LC_ERR_TIMEOUT);
    CHECK(now_ms() - t0 >= 300);
    CHECK(queue_empties(key));

    /* Nobody was handed the key behind our back: free after the unlock. */
    CHECK_ERR(lc_session_unlock(a, key, tok), LC_OK);
    CHECK_ERR(lc_session_trylock(b, key, &x), LC_OK);
    CHECK_ERR(lc_session_unlock(b, key, x), LC_OK);
    CHECK_ERR(lc_session_state(b), LC_OK);
    CHECK_ERR(lc_session_close(a, 5000), LC_OK);
    CHECK_ERR(lc_session_close(b, 5000), LC_OK);
    return failures ? 1 : 0;
}

/* A grant that crosses the Cancel is unlocked by its token before the call
 * returns, and the call fails: an error means nothing is held. */
static int test_session_cancel_crossing_grant(void) {
    fake_session f;
    fake_session_start(&f);
    lc_session *s = NULL;
    CHECK_ERR(open_at(f.addr, 0, NULL, &s), LC_OK);
    if (!s) return 1;
    uint64_t x = 1;
    CHECK_ERR(lc_session_lock(s, "k", 200, NULL, &x), LC_ERR_TIMEOUT);
    CHECK(x == 0);
    pthread_mutex_lock(&f.mu);
    CHECK(f.cancels == 1);
    CHECK(f.unlocks == 1 && f.unlock_token == 77);
    pthread_mutex_unlock(&f.mu);
    CHECK_ERR(lc_session_close(s, 2000), LC_OK);
    fake_session_stop(&f);
    return failures ? 1 : 0;
}

static int test_session_reset_while_waiting(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) return SKIP;
    lc_session *a = NULL, *b = NULL;
    CHECK_ERR(open_at(addr, 10000, "c-reset-a", &a), LC_OK);
    CHECK_ERR(open_at(addr, 10000, "c-reset-b", &b), LC_OK);
    if (!a || !b) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-reset");
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(a, key, 5000, NULL, &tok), LC_OK);
    locker l = {.s = b, .key = key, .timeout_ms = 10000};
    pthread_create(&l.th, NULL, locker_run, &l);
    CHECK(wait_queue(key, 1, 5000));
    CHECK_ERR(lc_session_reset_key(a, key), LC_OK);
    pthread_join(l.th, NULL);
    CHECK_ERR(l.result, LC_ERR_RESET);
    CHECK_ERR(lc_session_state(b), LC_OK); /* a refused lock is not a lost session */
    CHECK_ERR(lc_session_close(a, 5000), LC_OK);
    CHECK_ERR(lc_session_close(b, 5000), LC_OK);
    return failures ? 1 : 0;
}

static int scoped_calls;
static uint64_t scoped_token;
static int scoped_fn(void *arg, uint64_t token) {
    (void)arg;
    scoped_token = token;
    return ++scoped_calls;
}

/* The end of a session from the web API: the program is told (callback,
 * state, wait_end), later calls fail with SESSION_LOST, and the scoped form
 * reports that its hold ended under it. */
static int end_from_web(void *arg, uint64_t token) {
    lc_session *s = arg;
    (void)token;
    char path[128];
    snprintf(path, sizeof path, "/api/v1/sessions/%016" PRIx64 "/end", lc_session_id(s));
    int st = http(getenv("LC_TEST_WEB_ADDRESS"), "POST", path, NULL, 0);
    if (st != 200) fprintf(stderr, "  POST %s: %d\n", path, st);
    lc_session_wait_end(s, 5000);
    return st;
}

static int test_session_lost_ended_from_web(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) return SKIP;
    lost_seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = addr;
    o.ttl_ms = 10000;
    o.on_lost = on_lost;
    o.on_lost_arg = &seen;
    lc_session *s = NULL;
    CHECK_ERR(lc_session_open(&o, &s), LC_OK);
    if (!s) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-web-end");
    int r = 0;
    scoped_calls = 0;
    CHECK_ERR(lc_session_with_lock(s, key, 5000, NULL, scoped_fn, NULL, &r), LC_OK);
    CHECK(r == 1 && scoped_token != 0);
    CHECK_ERR(lc_session_with_lock(s, key, 5000, NULL, end_from_web, s, &r), LC_ERR_SESSION_LOST);
    CHECK(r == 200);
    CHECK_ERR(lc_session_state(s), LC_ERR_SESSION_LOST);
    CHECK_ERR(lc_session_wait_end(s, 1000), LC_ERR_SESSION_LOST);
    uint64_t x;
    CHECK_ERR(lc_session_lock(s, key, 1000, NULL, &x), LC_ERR_SESSION_LOST);
    CHECK_ERR(lc_session_unlock(s, key, 0), LC_ERR_SESSION_LOST);
    /* The key was released by the end. */
    lc_session *t = NULL;
    CHECK_ERR(open_at(addr, 0, NULL, &t), LC_OK);
    CHECK_ERR(lc_session_trylock(t, key, &x), LC_OK);
    CHECK_ERR(lc_session_close(t, 5000), LC_OK);
    CHECK_ERR(lc_session_close(s, 1000), LC_ERR_SESSION_LOST);
    CHECK(seen.calls == 1 && seen.why == LC_ERR_SESSION_LOST);
    return failures ? 1 : 0;
}

/* A session whose server is gone: lost once the TTL has passed since the
 * last answered request; told once; its pending calls fail. */
static int test_session_lost_ttl(void) {
    own_server srv = {0};
    int rc = server_start(&srv, NULL);
    if (rc) return rc;
    lost_seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = srv.addr;
    o.ttl_ms = 1000;
    o.on_lost = on_lost;
    o.on_lost_arg = &seen;
    lc_session *s = NULL;
    CHECK_ERR(lc_session_open(&o, &s), LC_OK);
    if (!s) {
        server_stop(&srv);
        return 1;
    }
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(s, "c-ttl", 5000, NULL, &tok), LC_OK);
    int64_t t0 = now_ms();
    server_stop(&srv);
    lc_err e = lc_session_wait_end(s, 5000);
    int64_t took = now_ms() - t0;
    CHECK_ERR(e, LC_ERR_SESSION_LOST);
    fprintf(stderr, "  lost %lld ms after the server stopped (TTL 1000 ms)\n", (long long)took);
    CHECK(took <= 1000 + 500);
    CHECK_ERR(lc_session_lock(s, "c-ttl", 1000, NULL, &tok), LC_ERR_SESSION_LOST);
    CHECK_ERR(lc_session_close(s, 1000), LC_ERR_SESSION_LOST);
    CHECK(lost_calls(&seen) == 1 && seen.why == LC_ERR_SESSION_LOST);
    return failures ? 1 : 0;
}

/* A restart of the server with DATA_PATH: the session resumes by itself and
 * keeps its hold (the same token unlocks it); a lock that was waiting fails
 * with DISCONNECTED; tokens keep growing. */
static int test_session_resume_after_restart(void) {
    own_server srv = {0};
    char dir[] = "/tmp/lc-c-test-XXXXXX";
    if (mkdtemp(dir) == NULL) return 1;
    char data[300];
    snprintf(data, sizeof data, "%s/lock.wal", dir);
    int rc = server_start(&srv, data);
    if (rc) {
        rmdir(dir);
        return rc;
    }
    lost_seen seen = {.mu = PTHREAD_MUTEX_INITIALIZER};
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = srv.addr;
    o.ttl_ms = 15000;
    o.on_lost = on_lost;
    o.on_lost_arg = &seen;
    lc_session *s = NULL;
    CHECK_ERR(lc_session_open(&o, &s), LC_OK);
    lc_client v1;
    lc_client_init(&v1, srv.addr, "c-v1");
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(s, "held", 5000, NULL, &tok), LC_OK);
    CHECK_ERR(lc_lock(&v1, "busy", 5000, NULL), LC_OK);
    locker l = {.s = s, .key = "busy", .timeout_ms = 20000};
    pthread_create(&l.th, NULL, locker_run, &l);
    int64_t end = now_ms() + 5000;
    char body[4096];
    while (now_ms() < end && !(http(srv.web, "GET", "/api/v1/keys/busy", body, sizeof body) == 200 &&
                               strstr(body, "\"queue\":[{") != NULL)) {
        sleep_ms(20);
    }
    server_stop(&srv);
    rc = server_start(&srv, data);
    CHECK(rc == 0);
    end = now_ms() + 10000;
    while (now_ms() < end && !lc_session_connected(s)) sleep_ms(20);
    CHECK(lc_session_connected(s));
    CHECK_ERR(lc_session_state(s), LC_OK);
    uint64_t x = 0;
    CHECK_ERR(lc_session_trylock(s, "busy", &x), LC_ERR_NOT_WON); /* v1 hold restored */
    /* The Lock that was waiting was reissued after the resume: it waits
     * behind the restored v1 hold, and gets the key when that goes. */
    CHECK(wait_queue_at(srv.web, "busy", 1, 5000));
    CHECK_ERR(lc_unlock(&v1, "busy"), LC_OK);
    pthread_join(l.th, NULL);
    CHECK_ERR(l.result, LC_OK);
    CHECK(l.token > tok);
    CHECK_ERR(lc_session_unlock(s, "busy", l.token), LC_OK);
    CHECK_ERR(lc_session_trylock(s, "other", &x), LC_OK);
    CHECK(x > l.token);
    CHECK_ERR(lc_session_unlock(s, "held", tok), LC_OK); /* the hold survived */
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    CHECK(lost_calls(&seen) == 0);
    server_stop(&srv);
    unlink(data);
    rmdir(dir);
    return failures ? 1 : 0;
}

/* A server with AUTH_TOKEN: an open without it or with another is refused,
 * one with it is served. */
static int test_session_auth_token(void) {
    own_server srv = {.auth = "s3cret-token"};
    int rc = server_start(&srv, NULL);
    if (rc) return rc;
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = srv.addr;
    lc_session *s = NULL;
    CHECK_ERR(lc_session_open(&o, &s), LC_ERR_REFUSED);
    o.auth = "wrong";
    CHECK_ERR(lc_session_open(&o, &s), LC_ERR_REFUSED);
    CHECK(s == NULL);
    o.auth = "s3cret-token";
    CHECK_ERR(lc_session_open(&o, &s), LC_OK);
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(s, "k", 5000, NULL, &tok), LC_OK);
    CHECK_ERR(lc_session_unlock(s, "k", tok), LC_OK);
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    server_stop(&srv);
    return failures ? 1 : 0;
}

/* Idle for 2.5 TTLs: Ping keeps the session and its hold. */
static int test_session_ping_keeps_alive(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    lc_session *s = NULL;
    CHECK_ERR(open_at(addr, 1000, "c-ping", &s), LC_OK);
    if (!s) return 1;
    char key[128];
    unique_key(key, sizeof key, "session-ping");
    uint64_t tok = 0;
    CHECK_ERR(lc_session_lock(s, key, 5000, NULL, &tok), LC_OK);
    sleep_ms(2500); /* the idleness under test */
    CHECK_ERR(lc_session_state(s), LC_OK);
    CHECK_ERR(lc_session_unlock(s, key, tok), LC_OK);
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    return failures ? 1 : 0;
}

/* Close releases every hold at once and fails calls still waiting. */
static int test_session_close_releases(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) return SKIP;
    lc_session *a = NULL, *b = NULL;
    CHECK_ERR(open_at(addr, 60000, "c-close-a", &a), LC_OK);
    CHECK_ERR(open_at(addr, 10000, "c-close-b", &b), LC_OK);
    if (!a || !b) return 1;
    char key[128], key2[128];
    unique_key(key, sizeof key, "session-close");
    unique_key(key2, sizeof key2, "session-close-2");
    uint64_t tok = 0, x = 0;
    CHECK_ERR(lc_session_lock(a, key, 5000, NULL, &tok), LC_OK);
    CHECK_ERR(lc_session_lock(b, key2, 5000, NULL, &x), LC_OK);
    locker l = {.s = a, .key = key2, .timeout_ms = 20000};
    pthread_create(&l.th, NULL, locker_run, &l);
    CHECK(wait_queue(key2, 1, 5000));
    CHECK_ERR(lc_session_close(a, 5000), LC_OK);
    pthread_join(l.th, NULL);
    CHECK_ERR(l.result, LC_ERR_SESSION_CLOSED);
    CHECK_ERR(lc_session_trylock(b, key, &x), LC_OK); /* released now, not a TTL later */
    CHECK_ERR(lc_session_close(b, 5000), LC_OK);
    return failures ? 1 : 0;
}

/* A holder killed with SIGKILL: its keys pass to the next waiter within the
 * TTL + 1 s. The child opens a session, takes the keys and says so. */
#define KILL_KEYS 20
static int test_session_sigkill_holder(void) {
    const char *addr = server_address();
    if (!addr) return SKIP;
    if (queue_length("x") < 0) return SKIP;
    char base[128];
    unique_key(base, sizeof base, "session-kill");
    int p[2];
    if (pipe(p) != 0) return 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        lc_session *s = NULL;
        if (open_at(addr, 2000, "c-killed", &s) != LC_OK) _exit(1);
        for (int i = 0; i < KILL_KEYS; i++) {
            char k[160];
            snprintf(k, sizeof k, "%s-%d", base, i);
            uint64_t t;
            if (lc_session_lock(s, k, 5000, NULL, &t) != LC_OK) _exit(1);
        }
        ssize_t w = write(p[1], "r", 1);
        (void)w;
        for (;;) pause();
    }
    close(p[1]);
    char r = 0;
    CHECK(read(p[0], &r, 1) == 1 && r == 'r');
    close(p[0]);
    lc_session *s = NULL;
    CHECK_ERR(open_at(addr, 10000, "c-next", &s), LC_OK);
    char keys[KILL_KEYS][160];
    locker l[KILL_KEYS];
    for (int i = 0; s && i < KILL_KEYS; i++) {
        snprintf(keys[i], sizeof keys[i], "%s-%d", base, i);
        l[i] = (locker){.s = s, .key = keys[i], .timeout_ms = 20000};
        pthread_create(&l[i].th, NULL, locker_run, &l[i]);
    }
    for (int i = 0; s && i < KILL_KEYS; i++) CHECK(wait_queue(keys[i], 1, 5000));
    int64_t t0 = now_ms();
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    int64_t worst = 0;
    for (int i = 0; s && i < KILL_KEYS; i++) {
        pthread_join(l[i].th, NULL);
        CHECK_ERR(l[i].result, LC_OK);
        if (l[i].granted_at - t0 > worst) worst = l[i].granted_at - t0;
    }
    fprintf(stderr, "  %d keys passed on %lld ms after SIGKILL at the latest (TTL 2000 ms)\n",
            KILL_KEYS, (long long)worst);
    CHECK(worst <= 2000 + 1000);
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    return failures ? 1 : 0;
}

const test_case session_tests[] = {
    {"session_vector_open", test_session_vector_open},
    {"session_vector_requests", test_session_vector_requests},
    {"session_vector_invalid", test_session_vector_invalid},
    {"original_frames", test_original_frames},
    {"session_basics", test_session_basics},
    {"session_threads", test_session_threads},
    {"session_fifo", test_session_fifo},
    {"session_cancel_withdraws", test_session_cancel_withdraws},
    {"session_cancel_crossing_grant", test_session_cancel_crossing_grant},
    {"session_reset_while_waiting", test_session_reset_while_waiting},
    {"session_lost_ended_from_web", test_session_lost_ended_from_web},
    {"session_lost_ttl", test_session_lost_ttl},
    {"session_resume_after_restart", test_session_resume_after_restart},
    {"session_ping_keeps_alive", test_session_ping_keeps_alive},
    {"session_auth_token", test_session_auth_token},
    {"session_silent_server_dropped", test_session_silent_server_dropped},
    {"session_close_releases", test_session_close_releases},
    {"session_sigkill_holder", test_session_sigkill_holder},
};
const size_t session_test_count = sizeof session_tests / sizeof session_tests[0];
