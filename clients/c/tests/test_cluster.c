/*
 * test_cluster.c - the C client against a real 3-node cluster and real TLS
 * servers, through the fixture clients/run-tests starts:
 *
 *   LC_TEST_CLUSTER          the client ports of the 3 nodes, comma-separated
 *   LC_TEST_CLUSTER_CONTROL  the fixture's HTTP API (/nodes, /kill-leader,
 *                            /restart, /await-leader)
 *   LC_TEST_LOST_ANSWER_PREFIX  keys whose grant's answer the leader never
 *                            sends (it SIGKILLs itself first)
 *   LC_TEST_TLS_ADDRESS, LC_TEST_MTLS_ADDRESS, LC_TEST_TLS_DIR
 *
 * Without them the tests skip, loudly; with CI=true they fail instead.
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"
#include "lockingcenter.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fixture's variable, or NULL (a skip, or a failure under CI). */
static const char *fixture(const char *name, int *rc) {
    const char *v = getenv(name);
    if (v && v[0]) return v;
    const char *ci = getenv("CI");
    bool in_ci = ci && strcmp(ci, "true") == 0;
    fprintf(stderr, "  %s not set: %s (clients/run-tests starts the cluster and TLS fixture)\n", name,
            in_ci ? "FAILED under CI=true" : "SKIPPED");
    *rc = in_ci ? 1 : SKIP;
    return NULL;
}

/* POST to the fixture's control API; the status (body in out). */
static int control(const char *path, char *out, size_t cap) {
    return http(getenv("LC_TEST_CLUSTER_CONTROL"), "POST", path, out, cap);
}

/* The client address of a node that is up and not the leader, from /nodes. */
static bool follower_address(char *out, size_t cap) {
    char body[8192];
    if (control("/await-leader", body, sizeof body) != 200) return false;
    json *j = json_parse(body);
    if (j == NULL) return false;
    const json *nodes = json_get(j, "nodes");
    bool found = false;
    for (size_t i = 0; nodes && i < nodes->n && !found; i++) {
        const json *n = &nodes->items[i];
        const json *leader = json_get(n, "leader"), *up = json_get(n, "up");
        const json *addr = json_get(n, "address");
        if (leader && leader->num == 0 && up && up->num != 0 && addr && addr->str) {
            snprintf(out, cap, "%s", addr->str);
            found = true;
        }
    }
    json_free(j);
    return found;
}

static lc_err cluster_session(const char *address, uint32_t ttl_ms, lc_session **s) {
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = address;
    o.ttl_ms = ttl_ms;
    o.source = "c-cluster-test";
    return lc_session_open(&o, s);
}

/* A Lock in a thread. */
typedef struct {
    lc_session *s;
    char key[LC_MAX_NAME + 1];
    lc_err result;
    uint64_t token;
    int64_t done_at;
    pthread_t th;
} waiter;

/* Guards waiter.done_at, which the test reads while the waiters run. */
static pthread_mutex_t waiters_mu = PTHREAD_MUTEX_INITIALIZER;

static void *waiter_run(void *arg) {
    waiter *w = arg;
    uint64_t token = 0;
    lc_err e = lc_session_lock(w->s, w->key, 60000, NULL, &token);
    pthread_mutex_lock(&waiters_mu);
    w->result = e;
    w->token = token;
    w->done_at = now_ms();
    pthread_mutex_unlock(&waiters_mu);
    return NULL;
}

static int64_t done_at(waiter *w) {
    pthread_mutex_lock(&waiters_mu);
    int64_t t = w->done_at;
    pthread_mutex_unlock(&waiters_mu);
    return t;
}

/* The web address of the leader, from /nodes. */
static bool leader_web(char *out, size_t cap) {
    char body[8192];
    if (control("/await-leader", body, sizeof body) != 200) return false;
    json *j = json_parse(body);
    if (j == NULL) return false;
    const json *nodes = json_get(j, "nodes");
    bool found = false;
    for (size_t i = 0; nodes && i < nodes->n && !found; i++) {
        const json *n = &nodes->items[i];
        const json *leader = json_get(n, "leader"), *web = json_get(n, "web");
        if (leader && leader->num != 0 && web && web->str) {
            snprintf(out, cap, "%s", web->str);
            found = true;
        }
    }
    json_free(j);
    return found;
}

/* Polls the leader's GET /api/v1/keys/KEY (wait queues live on the leader)
 * until key has want waiters. */
static bool leader_waiters(const char *web, const char *key, int want, int timeout_ms) {
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

#define HOLDS 10

/*
 * A session holding 10 keys and waiting on 10 more (held by a second
 * session) rides through a kill -9 of the leader: after it, both sessions
 * still hold their keys under the same tokens (an Unlock by token succeeds
 * only for the grant it names), the 10 waiting Locks were reissued and are
 * granted only once the second session lets go, with greater tokens.
 */
static int test_cluster_failover_kill_leader(void) {
    int rc = 0;
    const char *cluster = fixture("LC_TEST_CLUSTER", &rc);
    if (cluster == NULL || fixture("LC_TEST_CLUSTER_CONTROL", &rc) == NULL) return rc;
    char body[8192];
    CHECK(control("/await-leader", body, sizeof body) == 200);
    lc_session *a = NULL, *b = NULL;
    CHECK_ERR(cluster_session(cluster, 10000, &a), LC_OK);
    CHECK_ERR(cluster_session(cluster, 10000, &b), LC_OK);
    if (a == NULL || b == NULL) {
        lc_session_close(a, 2000);
        lc_session_close(b, 2000);
        return 1;
    }
    char held[HOLDS][LC_MAX_NAME + 1];
    uint64_t tokens[HOLDS], btokens[HOLDS];
    waiter w[HOLDS];
    for (int i = 0; i < HOLDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "failover-held-%d", i);
        unique_key(held[i], sizeof held[i], name);
        CHECK_ERR(lc_session_lock(a, held[i], 10000, NULL, &tokens[i]), LC_OK);
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = a;
        snprintf(name, sizeof name, "failover-wait-%d", i);
        unique_key(w[i].key, sizeof w[i].key, name);
        CHECK_ERR(lc_session_lock(b, w[i].key, 10000, NULL, &btokens[i]), LC_OK);
    }
    for (int i = 0; i < HOLDS; i++) pthread_create(&w[i].th, NULL, waiter_run, &w[i]);
    /* Every Lock waits on the leader before it dies. */
    char web[128];
    CHECK(leader_web(web, sizeof web));
    for (int i = 0; i < HOLDS; i++) CHECK(leader_waiters(web, w[i].key, 1, 10000));
    uint64_t x = 0;

    int64_t killed_at = now_ms();
    CHECK(control("/kill-leader", body, sizeof body) == 200);
    fprintf(stderr, "  killed the leader: %s\n", body);
    /* The first request answered after the kill: a trylock of a fresh key. */
    char probe[LC_MAX_NAME + 1];
    unique_key(probe, sizeof probe, "failover-probe");
    lc_err pe = lc_session_trylock(a, probe, &x);
    int64_t failover_ms = now_ms() - killed_at;
    CHECK_ERR(pe, LC_OK);
    if (pe == LC_OK) CHECK_ERR(lc_session_unlock(a, probe, x), LC_OK);
    printf("  failover: the session answered again %lld ms after the leader's kill -9\n",
           (long long)failover_ms);
    fflush(stdout);

    CHECK_ERR(lc_session_state(a), LC_OK);
    CHECK_ERR(lc_session_state(b), LC_OK);
    /* Nothing granted twice: every waited-for key is still b's. */
    for (int i = 0; i < HOLDS; i++) {
        CHECK_ERR(lc_session_trylock(a, w[i].key, &x), LC_ERR_NOT_WON);
        CHECK_ERR(lc_session_trylock(a, held[i], &x), LC_ERR_NOT_WON);
        CHECK(done_at(&w[i]) == 0);
    }
    /* b lets go: each reissued Lock of a gets its key, with a greater token. */
    int64_t released_at = now_ms();
    for (int i = 0; i < HOLDS; i++) CHECK_ERR(lc_session_unlock(b, w[i].key, btokens[i]), LC_OK);
    for (int i = 0; i < HOLDS; i++) {
        pthread_join(w[i].th, NULL);
        CHECK_ERR(w[i].result, LC_OK);
        CHECK(w[i].done_at >= released_at);
        CHECK(w[i].token > btokens[i]);
    }
    /* The holds made before the kill are there under their tokens. */
    for (int i = 0; i < HOLDS; i++) {
        CHECK_ERR(lc_session_unlock(a, held[i], tokens[i]), LC_OK);
        CHECK_ERR(lc_session_unlock(a, w[i].key, w[i].token), LC_OK);
    }
    CHECK_ERR(lc_session_close(a, 5000), LC_OK);
    CHECK_ERR(lc_session_close(b, 5000), LC_OK);
    CHECK(control("/restart", body, sizeof body) == 200);
    return failures ? 1 : 0;
}

/*
 * A Lock whose grant commits but whose answer is never sent (the leader
 * kills itself first): the session resumes on another node, reissues the
 * Lock with its old id and gets the grant's token, instead of waiting
 * behind its own hold.
 */
static int test_cluster_lost_answer_reissued(void) {
    int rc = 0;
    const char *cluster = fixture("LC_TEST_CLUSTER", &rc);
    if (cluster == NULL || fixture("LC_TEST_CLUSTER_CONTROL", &rc) == NULL) return rc;
    const char *prefix = fixture("LC_TEST_LOST_ANSWER_PREFIX", &rc);
    if (prefix == NULL) return rc;
    char body[8192];
    CHECK(control("/await-leader", body, sizeof body) == 200);
    lc_session *s = NULL;
    CHECK_ERR(cluster_session(cluster, 10000, &s), LC_OK);
    if (s == NULL) return 1;
    char key[LC_MAX_NAME + 1];
    snprintf(key, sizeof key, "%sc-%s", prefix, run_id);
    uint64_t token = 0;
    int64_t t0 = now_ms();
    /* 30 s: a Lock waiting behind its own grant would time out here. */
    lc_err e = lc_session_lock(s, key, 30000, NULL, &token);
    int64_t took = now_ms() - t0;
    CHECK_ERR(e, LC_OK);
    CHECK(token != 0);
    printf("  lost answer: the reissued Lock got its grant (token %llu) %lld ms after it was sent\n",
           (unsigned long long)token, (long long)took);
    fflush(stdout);
    uint64_t x = 0;
    CHECK_ERR(lc_session_trylock(s, key, &x), LC_ERR_NOT_WON);
    CHECK_ERR(lc_session_unlock(s, key, token), LC_OK); /* the grant is that token's */
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    CHECK(control("/restart", body, sizeof body) == 200);
    return failures ? 1 : 0;
}

/* A follower's address alone works (it forwards to the leader), and a list
 * whose other address is dead works too, v1 and session alike. */
static int test_cluster_follower_address(void) {
    int rc = 0;
    if (fixture("LC_TEST_CLUSTER", &rc) == NULL || fixture("LC_TEST_CLUSTER_CONTROL", &rc) == NULL) {
        return rc;
    }
    char follower[128];
    CHECK(follower_address(follower, sizeof follower));
    if (failures) return 1;
    char list[256];
    snprintf(list, sizeof list, "127.0.0.1:%d, %s", dead_port(), follower);
    const char *addresses[2] = {follower, list};
    for (int i = 0; i < 2; i++) {
        char key[LC_MAX_NAME + 1];
        unique_key(key, sizeof key, i == 0 ? "follower" : "follower-list");
        lc_session *s = NULL;
        CHECK_ERR(cluster_session(addresses[i], 0, &s), LC_OK);
        uint64_t token = 0, x = 0;
        CHECK_ERR(lc_session_lock(s, key, 10000, NULL, &token), LC_OK);
        CHECK(token != 0);
        CHECK_ERR(lc_session_trylock(s, key, &x), LC_ERR_NOT_WON);
        CHECK_ERR(lc_session_unlock(s, key, token), LC_OK);
        CHECK_ERR(lc_session_close(s, 5000), LC_OK);
        lc_client c;
        CHECK_ERR(lc_client_init(&c, addresses[i], "c-cluster-v1"), LC_OK);
        CHECK(c.naddrs == (size_t)(i + 1));
        bool won = false;
        CHECK_ERR(lc_trylock(&c, key, &won), LC_OK);
        CHECK(won);
        CHECK_ERR(lc_unlock(&c, key), LC_OK);
    }
    return failures ? 1 : 0;
}

/* ---- TLS --------------------------------------------------------------- */

static lc_err tls_config(const char *ca, bool client_cert, const char *name, lc_tls **out) {
    const char *dir = getenv("LC_TEST_TLS_DIR");
    char caf[512], cert[512], key[512];
    snprintf(caf, sizeof caf, "%s/%s", dir, ca);
    snprintf(cert, sizeof cert, "%s/client.pem", dir);
    snprintf(key, sizeof key, "%s/client-key.pem", dir);
    lc_tls_options o;
    lc_tls_options_init(&o);
    o.ca_file = caf;
    if (client_cert) {
        o.cert_file = cert;
        o.key_file = key;
    }
    o.server_name = name;
    return lc_tls_new(&o, out);
}

static lc_err tls_session(const char *address, lc_tls *t, lc_session **s) {
    lc_session_options o;
    lc_session_options_init(&o);
    o.address = address;
    o.tls = t;
    o.connect_timeout_ms = 3000;
    return lc_session_open(&o, s);
}

/* A session and v1 calls over TLS, the certificate checked against the
 * test CA by IP address and by DNS name. */
static int test_tls_session_and_v1(void) {
    int rc = 0;
    const char *addr = fixture("LC_TEST_TLS_ADDRESS", &rc);
    if (addr == NULL || fixture("LC_TEST_TLS_DIR", &rc) == NULL) return rc;
    lc_tls *t = NULL;
    lc_err e = tls_config("ca.pem", false, NULL, &t);
    if (!lc_tls_available()) {
        CHECK_ERR(e, LC_ERR_UNSUPPORTED);
        fprintf(stderr, "  this build has no TLS (no OpenSSL): lc_tls_new says so\n");
        return failures ? 1 : 0;
    }
    CHECK_ERR(e, LC_OK);
    char by_name[128];
    snprintf(by_name, sizeof by_name, "localhost:%s", strrchr(addr, ':') + 1);
    const char *addresses[2] = {addr, by_name};
    for (int i = 0; i < 2 && t; i++) {
        char key[LC_MAX_NAME + 1];
        unique_key(key, sizeof key, i == 0 ? "tls-ip" : "tls-name");
        lc_session *s = NULL;
        CHECK_ERR(tls_session(addresses[i], t, &s), LC_OK);
        uint64_t token = 0, x = 0;
        CHECK_ERR(lc_session_lock(s, key, 5000, NULL, &token), LC_OK);
        CHECK_ERR(lc_session_trylock(s, key, &x), LC_ERR_NOT_WON);
        CHECK_ERR(lc_session_unlock(s, key, token), LC_OK);
        CHECK_ERR(lc_session_close(s, 5000), LC_OK);
        lc_client c;
        CHECK_ERR(lc_client_init(&c, addresses[i], "c-tls-v1"), LC_OK);
        c.tls = t;
        CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
        bool won = true;
        CHECK_ERR(lc_trylock(&c, key, &won), LC_OK);
        CHECK(!won);
        CHECK_ERR(lc_unlock(&c, key), LC_OK);
        /* A waiting lock that times out hangs up with close_notify: the
         * server withdraws it. */
        CHECK_ERR(lc_lock(&c, key, 5000, NULL), LC_OK);
        CHECK_ERR(lc_lock(&c, key, 200, NULL), LC_ERR_TIMEOUT);
        CHECK_ERR(lc_unlock(&c, key), LC_OK);
        CHECK_ERR(lc_unlock(&c, key), LC_ERR_REFUSED);
    }
    lc_tls_free(t);
    return failures ? 1 : 0;
}

/* A wrong server name, or an unrelated CA, fails the handshake: LC_ERR_TLS. */
static int test_tls_refused(void) {
    int rc = 0;
    const char *addr = fixture("LC_TEST_TLS_ADDRESS", &rc);
    if (addr == NULL || fixture("LC_TEST_TLS_DIR", &rc) == NULL) return rc;
    if (!lc_tls_available()) {
        fprintf(stderr, "  this build has no TLS (no OpenSSL)\n");
        return 0;
    }
    struct {
        const char *ca, *name;
    } cases[2] = {{"ca.pem", "wrong.invalid"}, {"other-ca.pem", NULL}};
    for (int i = 0; i < 2; i++) {
        lc_tls *t = NULL;
        CHECK_ERR(tls_config(cases[i].ca, false, cases[i].name, &t), LC_OK);
        lc_session *s = NULL;
        CHECK_ERR(tls_session(addr, t, &s), LC_ERR_TLS);
        CHECK(s == NULL);
        lc_client c;
        CHECK_ERR(lc_client_init(&c, addr, NULL), LC_OK);
        c.tls = t;
        bool won = false;
        char key[LC_MAX_NAME + 1];
        unique_key(key, sizeof key, "tls-refused");
        CHECK_ERR(lc_trylock(&c, key, &won), LC_ERR_TLS);
        lc_tls_free(t);
    }
    /* A file that is not there. */
    lc_tls *t = NULL;
    CHECK_ERR(tls_config("no-such-ca.pem", false, NULL, &t), LC_ERR_TLS);
    CHECK(t == NULL);
    return failures ? 1 : 0;
}

/* Mutual TLS: with the client certificate the server takes the session;
 * without one it refuses the connection. */
static int test_tls_mutual(void) {
    int rc = 0;
    const char *addr = fixture("LC_TEST_MTLS_ADDRESS", &rc);
    if (addr == NULL || fixture("LC_TEST_TLS_DIR", &rc) == NULL) return rc;
    if (!lc_tls_available()) {
        fprintf(stderr, "  this build has no TLS (no OpenSSL)\n");
        return 0;
    }
    lc_tls *with = NULL, *without = NULL;
    CHECK_ERR(tls_config("ca.pem", true, NULL, &with), LC_OK);
    CHECK_ERR(tls_config("ca.pem", false, NULL, &without), LC_OK);
    char key[LC_MAX_NAME + 1];
    unique_key(key, sizeof key, "mtls");
    lc_session *s = NULL;
    CHECK_ERR(tls_session(addr, with, &s), LC_OK);
    uint64_t token = 0;
    CHECK_ERR(lc_session_lock(s, key, 5000, NULL, &token), LC_OK);
    CHECK_ERR(lc_session_unlock(s, key, token), LC_OK);
    CHECK_ERR(lc_session_close(s, 5000), LC_OK);
    s = NULL;
    lc_err e = tls_session(addr, without, &s);
    CHECK(e == LC_ERR_TLS || e == LC_ERR_UNREACHABLE);
    CHECK(s == NULL);
    lc_client c;
    CHECK_ERR(lc_client_init(&c, addr, NULL), LC_OK);
    c.tls = with;
    bool won = false;
    CHECK_ERR(lc_trylock(&c, key, &won), LC_OK);
    CHECK(won);
    CHECK_ERR(lc_unlock(&c, key), LC_OK);
    lc_tls_free(with);
    lc_tls_free(without);
    return failures ? 1 : 0;
}

const test_case cluster_tests[] = {
    {"cluster_failover_kill_leader", test_cluster_failover_kill_leader},
    {"cluster_lost_answer_reissued", test_cluster_lost_answer_reissued},
    {"cluster_follower_address", test_cluster_follower_address},
    {"tls_session_and_v1", test_tls_session_and_v1},
    {"tls_refused", test_tls_refused},
    {"tls_mutual", test_tls_mutual},
};
const size_t cluster_test_count = sizeof cluster_tests / sizeof cluster_tests[0];
