/*
 * lc_internal.h - helpers shared by the v1 client (lockingcenter.c), the
 * session (session.c) and the transport (transport.c). Not installed;
 * hidden in the shared library.
 */
#ifndef LC_INTERNAL_H
#define LC_INTERNAL_H

#include "lockingcenter.h"

#include <pthread.h>
#include <stdint.h>

/* No deadline (a monotonic time in ms that never comes). */
#define LC_NO_DEADLINE INT64_MAX

/* Monotonic clock, in milliseconds. */
int64_t lc__now_ms(void);
/* Sets O_NONBLOCK and FD_CLOEXEC; 0 or -1 (errno set). */
int lc__set_flags(int fd);
/* Waits until fd has events, deadline passes (LC_ERR_TIMEOUT) or cancel
 * triggers (LC_ERR_CANCELED); LC_OK when ready, LC_ERR_SYSTEM on failure. */
lc_err lc__wait_fd(int fd, short events, int64_t deadline, const lc_cancel *cancel);

/* A seed for lc__rand_next (clock, stack address, pid), and xorshift64 over
 * it: the order of addresses and back-off jitter, no secrecy. */
uint64_t lc__rand_seed(void);
uint64_t lc__rand_next(uint64_t *state);
/* order = a random permutation of 0..n-1. */
void lc__shuffle(size_t *order, size_t n, uint64_t *rng);

/* One connection: a non-blocking socket, and over it an OpenSSL SSL when
 * the client uses TLS. One reader and one writer may use it at once. */
typedef struct lc_conn {
    int fd;
    void *ssl;           /* SSL *, NULL for plain TCP */
    pthread_mutex_t *mu; /* guards ssl (one OpenSSL call at a time); made with it,
                          * on the heap so that an lc_conn may be copied */
} lc_conn;

void lc__conn_init(lc_conn *k);
/* Connects to c->addrs[which] (every address its name resolves to, in
 * random order, each attempt given c's connect timeout within deadline),
 * then does the TLS handshake when c->tls is set. LC_OK with *out set;
 * LC_ERR_UNREACHABLE, LC_ERR_TLS, LC_ERR_TIMEOUT (deadline), LC_ERR_CANCELED. */
lc_err lc__connect_address(const lc_client *c, size_t which, int64_t deadline,
                           const lc_cancel *cancel, uint64_t *rng, lc_conn *out);
/* One round over all of c's addresses in random order; the first that
 * connects wins. */
lc_err lc__dial(const lc_client *c, int64_t deadline, const lc_cancel *cancel, lc_conn *out);
/* Writes all of b before deadline. LC_ERR_UNREACHABLE when the connection
 * broke, LC_ERR_TLS on a TLS error. */
lc_err lc__conn_send(lc_conn *k, const uint8_t *b, size_t n, int64_t deadline,
                     const lc_cancel *cancel);
/* Reads 1..cap bytes (*got) before deadline; LC_ERR_UNREACHABLE at EOF
 * (errno ECONNRESET) or on an error, LC_ERR_TLS on a TLS error (an alert:
 * a server refusing this client's certificate says so here). */
lc_err lc__conn_recv(lc_conn *k, uint8_t *b, size_t cap, size_t *got, int64_t deadline,
                     const lc_cancel *cancel);
/* Closes the write side (TCP FIN; TLS close_notify): the server sees EOF. */
void lc__conn_hangup(lc_conn *k);
/* Wakes a thread blocked on k (shutdown of the socket); k stays open. */
void lc__conn_interrupt(lc_conn *k);
/* Frees k; errno is kept. */
void lc__conn_close(lc_conn *k);

#endif
