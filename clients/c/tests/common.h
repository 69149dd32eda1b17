/*
 * common.h - what the v1 tests (test_lockingcenter.c) and the session tests
 * (test_session.c) share: the check macros, clocks, the vectors, the web API.
 */
#ifndef LC_TEST_COMMON_H
#define LC_TEST_COMMON_H

#include "json.h"
#include "lockingcenter.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SKIP 77

/* Failed checks of the running test. */
extern int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_ERR(got, want)                                                          \
    do {                                                                              \
        lc_err g_ = (got), w_ = (want);                                               \
        if (g_ != w_) {                                                               \
            fprintf(stderr, "  %s:%d: %s gave \"%s\", want \"%s\"\n", __FILE__, __LINE__, \
                    #got, lc_strerror(g_), lc_strerror(w_));                          \
            failures++;                                                               \
        }                                                                             \
    } while (0)

int64_t now_ms(void);
void sleep_ms(int ms);
size_t hex_decode(const char *hex, uint8_t *out, size_t cap);
/* A loopback port nothing listens on (bound, then closed). */
int dead_port(void);
json *load_vectors(void);
/* A key unique to this run: c-test-RUN-name. */
extern char run_id[32];
void unique_key(char *out, size_t cap, const char *name);
/* Waiters of key in GET /api/v1/keys/KEY (0 when not held), -1 when the web
 * API cannot be asked. */
int queue_length(const char *key);
/* Polls the web API until key has want waiters; true when seen. */
bool wait_queue(const char *key, int want, int timeout_ms);

/* One HTTP/1.0 request to web (host:port): the status (-1: no answer), the
 * body in out. */
int http(const char *web, const char *method, const char *path, char *out, size_t cap);

/* The session tests' table. */
typedef struct {
    const char *name;
    int (*fn)(void);
} test_case;
extern const test_case session_tests[];
extern const size_t session_test_count;
/* The cluster and TLS tests' table. */
extern const test_case cluster_tests[];
extern const size_t cluster_test_count;

#endif
