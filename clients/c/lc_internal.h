/*
 * lc_internal.h - helpers shared by the v1 client (lockingcenter.c) and the
 * session (session.c). Not installed; hidden in the shared library.
 */
#ifndef LC_INTERNAL_H
#define LC_INTERNAL_H

#include "lockingcenter.h"

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
/* Connects to c's address (non-blocking socket, close-on-exec) before the
 * earlier of c's connect timeout and deadline. LC_OK with *out set. */
lc_err lc__dial(const lc_client *c, int64_t deadline, const lc_cancel *cancel, int *out);

#endif
