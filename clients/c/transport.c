/*
 * transport.c - how the C client reaches a server: the address list (tried
 * in random order, every address a DNS name gives included), the TCP
 * connect with its per-attempt timeout, and TLS over OpenSSL when the
 * library was built with it (LC_HAVE_OPENSSL). See lockingcenter.h.
 *
 * An lc_conn is a socket, non-blocking, with an OpenSSL object over it when
 * TLS is on. One reader thread and one writer thread may use a connection
 * at once (a session does); OpenSSL allows one call on an SSL at a time, so
 * every SSL_* call on it is made under the connection's mutex, and never
 * blocks: waiting for the socket happens in poll(2), outside the mutex.
 */
#define _POSIX_C_SOURCE 200809L

#include "lc_internal.h"
#include "lockingcenter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef LC_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#ifdef MSG_NOSIGNAL
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

/* Most addresses one DNS name may give that are tried. */
#define MAX_RESOLVED 16

/* ---- randomness (jitter and order only: no secrecy needed) ------------- */

uint64_t lc__rand_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int local = 0;
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                 (uint64_t)(uintptr_t)&local ^ (uint64_t)getpid() << 32;
    return x ? x : 0x2545F4914F6CDD1Dull;
}

uint64_t lc__rand_next(uint64_t *state) {
    uint64_t x = *state; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

void lc__shuffle(size_t *order, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(lc__rand_next(rng) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

/* ---- TLS configuration ------------------------------------------------- */

bool lc_tls_available(void) {
#ifdef LC_HAVE_OPENSSL
    return true;
#else
    return false;
#endif
}

void lc_tls_options_init(lc_tls_options *o) {
    if (o) memset(o, 0, sizeof *o);
}

#ifdef LC_HAVE_OPENSSL
struct lc_tls {
    SSL_CTX *ctx; /* read-only once made: OpenSSL lets threads share it */
    /* OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a
     * connection the server closed; this one is the same but sends with
     * MSG_NOSIGNAL (the library installs no signal handlers). Read-only. */
    BIO_METHOD *bio;
    char server_name[256];
};

static int nosignal_write(BIO *b, const char *buf, int len) {
    int fd = -1;
    BIO_get_fd(b, &fd);
    errno = 0;
    ssize_t n = send(fd, buf, (size_t)(len < 0 ? 0 : len), SEND_FLAGS);
    BIO_clear_retry_flags(b);
    if (n <= 0 && BIO_sock_should_retry((int)n)) BIO_set_retry_write(b);
    return (int)n;
}

static BIO_METHOD *nosignal_socket_method(void) {
    const BIO_METHOD *sock = BIO_s_socket();
    int index = BIO_get_new_index();
    if (index < 0) return NULL;
    BIO_METHOD *m = BIO_meth_new(index | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "lc socket");
    if (m == NULL) return NULL;
    if (BIO_meth_set_write(m, nosignal_write) != 1 || BIO_meth_set_read(m, BIO_meth_get_read(sock)) != 1 ||
        BIO_meth_set_puts(m, BIO_meth_get_puts(sock)) != 1 ||
        BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) != 1 ||
        BIO_meth_set_create(m, BIO_meth_get_create(sock)) != 1 ||
        BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock)) != 1) {
        BIO_meth_free(m);
        return NULL;
    }
    return m;
}
#endif

lc_err lc_tls_new(const lc_tls_options *o, lc_tls **out) {
    if (o == NULL || out == NULL) return LC_ERR_INVALID;
    *out = NULL;
    if (o->server_name && strlen(o->server_name) >= 256) return LC_ERR_INVALID;
    if ((o->cert_file == NULL) != (o->key_file == NULL)) return LC_ERR_INVALID;
#ifdef LC_HAVE_OPENSSL
    lc_tls *t = calloc(1, sizeof *t);
    if (t == NULL) return LC_ERR_SYSTEM;
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (t->ctx == NULL) {
        free(t);
        return LC_ERR_SYSTEM;
    }
    /* The server speaks TLS 1.2 or later (SPEC §2). */
    bool ok = SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) == 1;
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (ok) {
        ok = o->ca_file ? SSL_CTX_load_verify_locations(t->ctx, o->ca_file, NULL) == 1
                        : SSL_CTX_set_default_verify_paths(t->ctx) == 1;
    }
    if (ok) {
        t->bio = nosignal_socket_method();
        ok = t->bio != NULL;
    }
    if (ok && o->cert_file) {
        ok = SSL_CTX_use_certificate_chain_file(t->ctx, o->cert_file) == 1 &&
             SSL_CTX_use_PrivateKey_file(t->ctx, o->key_file, SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_check_private_key(t->ctx) == 1;
    }
    ERR_clear_error();
    if (!ok) {
        if (t->bio) BIO_meth_free(t->bio);
        SSL_CTX_free(t->ctx);
        free(t);
        return LC_ERR_TLS;
    }
    if (o->server_name) strcpy(t->server_name, o->server_name);
    *out = t;
    return LC_OK;
#else
    return LC_ERR_UNSUPPORTED;
#endif
}

void lc_tls_free(lc_tls *t) {
#ifdef LC_HAVE_OPENSSL
    if (t == NULL) return;
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->bio);
    free(t);
#else
    (void)t;
#endif
}

/* ---- connections ------------------------------------------------------- */

void lc__conn_init(lc_conn *k) {
    memset(k, 0, sizeof *k);
    k->fd = -1;
}

#ifdef LC_HAVE_OPENSSL
/* Maps an SSL call's outcome: 0 done, POLLIN / POLLOUT wait, else the error. */
static int ssl_wait_for(SSL *ssl, int rc, lc_err *err) {
    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_NONE: return 0;
    case SSL_ERROR_WANT_READ: return POLLIN;
    case SSL_ERROR_WANT_WRITE: return POLLOUT;
    case SSL_ERROR_SSL:
        /* A protocol error, a certificate refused (either side), an alert. */
        *err = LC_ERR_TLS;
        return -1;
    default: /* SSL_ERROR_ZERO_RETURN (close_notify), SSL_ERROR_SYSCALL (EOF, reset) */
        if (errno == 0) errno = ECONNRESET;
        *err = LC_ERR_UNREACHABLE;
        return -1;
    }
}

static bool is_ip(const char *host) {
    unsigned char b[16];
    return inet_pton(AF_INET, host, b) == 1 || inet_pton(AF_INET6, host, b) == 1;
}

/* The TLS handshake over k->fd before deadline; the certificate must be
 * signed by a trusted CA and name host (or the configured server name). */
static lc_err handshake(lc_conn *k, const lc_tls *tls, const char *host, int64_t deadline,
                        const lc_cancel *cancel) {
    SSL *ssl = SSL_new(tls->ctx);
    if (ssl == NULL) return LC_ERR_SYSTEM;
    const char *name = tls->server_name[0] ? tls->server_name : host;
    BIO *bio = BIO_new(tls->bio);
    bool ok = bio != NULL;
    if (ok) {
        BIO_set_fd(bio, k->fd, BIO_NOCLOSE);
        SSL_set_bio(ssl, bio, bio); /* ssl owns it now */
    }
    if (ok && is_ip(name)) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else if (ok) {
        ok = SSL_set_tlsext_host_name(ssl, name) == 1 && SSL_set1_host(ssl, name) == 1;
    }
    if (!ok) {
        ERR_clear_error();
        SSL_free(ssl);
        return LC_ERR_SYSTEM;
    }
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int rc = SSL_connect(ssl);
        lc_err err = LC_OK;
        int w = rc == 1 ? 0 : ssl_wait_for(ssl, rc, &err);
        if (w == 0) break;
        if (w < 0) {
            ERR_clear_error();
            SSL_free(ssl);
            return err;
        }
        lc_err e = lc__wait_fd(k->fd, (short)w, deadline, cancel);
        if (e != LC_OK) {
            SSL_free(ssl);
            return e;
        }
    }
    k->mu = malloc(sizeof *k->mu);
    if (k->mu == NULL || pthread_mutex_init(k->mu, NULL) != 0) {
        free(k->mu);
        k->mu = NULL;
        SSL_free(ssl);
        return LC_ERR_SYSTEM;
    }
    k->ssl = ssl;
    return LC_OK;
}
#endif

/* TCP connect to one resolved address before deadline. */
static lc_err connect_one(const struct addrinfo *ai, int64_t deadline, const lc_cancel *cancel,
                          int *out) {
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) return LC_ERR_UNREACHABLE;
    if (lc__set_flags(fd) != 0) {
        close(fd);
        return LC_ERR_SYSTEM;
    }
#ifdef SO_NOSIGPIPE
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
        int saved = errno;
        close(fd);
        errno = saved;
        return LC_ERR_UNREACHABLE;
    }
    if (rc != 0) {
        lc_err w = lc__wait_fd(fd, POLLOUT, deadline, cancel);
        if (w != LC_OK) {
            int saved = w == LC_ERR_TIMEOUT ? ETIMEDOUT : errno;
            close(fd);
            errno = saved;
            return w;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) soerr = errno;
        if (soerr != 0) {
            close(fd);
            errno = soerr;
            return LC_ERR_UNREACHABLE;
        }
    }
    *out = fd;
    return LC_OK;
}

lc_err lc__connect_address(const lc_client *c, size_t which, int64_t deadline,
                           const lc_cancel *cancel, uint64_t *rng, lc_conn *out) {
    lc__conn_init(out);
    const lc_address *a = &c->addrs[which];
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(a->host, a->port, &hints, &res);
    if (gai != 0) {
        errno = gai == EAI_SYSTEM ? errno : EHOSTUNREACH;
        return LC_ERR_UNREACHABLE;
    }
    const struct addrinfo *ais[MAX_RESOLVED];
    size_t n = 0, order[MAX_RESOLVED];
    for (const struct addrinfo *ai = res; ai && n < MAX_RESOLVED; ai = ai->ai_next) ais[n++] = ai;
    lc__shuffle(order, n, rng); /* a name with several records: any of them, in random order */
    lc_err result = LC_ERR_UNREACHABLE;
    int last_errno = ECONNREFUSED;
    for (size_t i = 0; i < n; i++) {
        /* Each attempt has the connect timeout, within the call's deadline. */
        int64_t until = lc__now_ms() + (c->connect_timeout_ms > 0 ? c->connect_timeout_ms : 5000);
        bool call_first = deadline < until;
        if (call_first) until = deadline;
        int fd = -1;
        lc_err e = connect_one(ais[order[i]], until, cancel, &fd);
        if (e == LC_OK) {
            out->fd = fd;
#ifdef LC_HAVE_OPENSSL
            if (c->tls) {
                e = handshake(out, c->tls, a->host, until, cancel);
                if (e != LC_OK) {
                    int saved = errno;
                    close(fd);
                    out->fd = -1;
                    errno = saved;
                }
            }
#endif
            if (e == LC_OK) {
                freeaddrinfo(res);
                return LC_OK;
            }
        }
        last_errno = errno;
        if (e == LC_ERR_CANCELED || e == LC_ERR_SYSTEM || (e == LC_ERR_TIMEOUT && call_first)) {
            result = e;
            break;
        }
        if (e == LC_ERR_TLS) result = LC_ERR_TLS;
    }
    freeaddrinfo(res);
    errno = last_errno;
    return result;
}

lc_err lc__dial(const lc_client *c, int64_t deadline, const lc_cancel *cancel, lc_conn *out) {
    uint64_t rng = lc__rand_seed();
    size_t order[LC_MAX_ADDRESSES];
    size_t n = c->naddrs;
    lc__shuffle(order, n, &rng);
    lc_err result = LC_ERR_UNREACHABLE;
    for (size_t i = 0; i < n; i++) {
        lc_err e = lc__connect_address(c, order[i], deadline, cancel, &rng, out);
        if (e == LC_OK) return LC_OK;
        if (e == LC_ERR_CANCELED || e == LC_ERR_SYSTEM || e == LC_ERR_TIMEOUT) return e;
        if (e == LC_ERR_TLS) result = e;
    }
    return result;
}

lc_err lc__conn_send(lc_conn *k, const uint8_t *b, size_t n, int64_t deadline,
                     const lc_cancel *cancel) {
    size_t off = 0;
    while (off < n) {
        short want = POLLOUT;
#ifdef LC_HAVE_OPENSSL
        if (k->ssl) {
            pthread_mutex_lock(k->mu);
            ERR_clear_error();
            errno = 0;
            int len = n - off > INT32_MAX ? INT32_MAX : (int)(n - off);
            int rc = SSL_write(k->ssl, b + off, len);
            lc_err err = LC_OK;
            int w = rc > 0 ? 0 : ssl_wait_for(k->ssl, rc, &err);
            ERR_clear_error();
            pthread_mutex_unlock(k->mu);
            if (rc > 0) {
                off += (size_t)rc;
                continue;
            }
            if (w < 0) return err;
            want = (short)w;
        } else
#endif
        {
            ssize_t w = send(k->fd, b + off, n - off, SEND_FLAGS);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno == EINTR) continue;
            if (!(w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) return LC_ERR_UNREACHABLE;
        }
        lc_err e = lc__wait_fd(k->fd, want, deadline, cancel);
        if (e != LC_OK) return e;
    }
    return LC_OK;
}

lc_err lc__conn_recv(lc_conn *k, uint8_t *b, size_t cap, size_t *got, int64_t deadline,
                     const lc_cancel *cancel) {
    *got = 0;
    for (;;) {
        short want = POLLIN;
#ifdef LC_HAVE_OPENSSL
        if (k->ssl) {
            pthread_mutex_lock(k->mu);
            ERR_clear_error();
            errno = 0;
            int len = cap > INT32_MAX ? INT32_MAX : (int)cap;
            int rc = SSL_read(k->ssl, b, len);
            lc_err err = LC_OK;
            int w = rc > 0 ? 0 : ssl_wait_for(k->ssl, rc, &err);
            ERR_clear_error();
            pthread_mutex_unlock(k->mu);
            if (rc > 0) {
                *got = (size_t)rc;
                return LC_OK;
            }
            if (w < 0) return err;
            want = (short)w;
        } else
#endif
        {
            ssize_t r = recv(k->fd, b, cap, 0);
            if (r > 0) {
                *got = (size_t)r;
                return LC_OK;
            }
            if (r == 0) {
                errno = ECONNRESET;
                return LC_ERR_UNREACHABLE;
            }
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return LC_ERR_UNREACHABLE;
        }
        lc_err e = lc__wait_fd(k->fd, want, deadline, cancel);
        if (e != LC_OK) return e;
    }
}

void lc__conn_hangup(lc_conn *k) {
#ifdef LC_HAVE_OPENSSL
    if (k->ssl) {
        /* close_notify: the server reads it as the client's EOF. */
        pthread_mutex_lock(k->mu);
        ERR_clear_error();
        (void)SSL_shutdown(k->ssl);
        ERR_clear_error();
        pthread_mutex_unlock(k->mu);
        return;
    }
#endif
    shutdown(k->fd, SHUT_WR);
}

void lc__conn_interrupt(lc_conn *k) {
    if (k->fd >= 0) shutdown(k->fd, SHUT_RDWR);
}

void lc__conn_close(lc_conn *k) {
    int saved = errno;
#ifdef LC_HAVE_OPENSSL
    if (k->ssl) {
        SSL_free(k->ssl);
        pthread_mutex_destroy(k->mu);
        free(k->mu);
        k->ssl = NULL;
        k->mu = NULL;
    }
#endif
    if (k->fd >= 0) close(k->fd);
    k->fd = -1;
    errno = saved;
}
