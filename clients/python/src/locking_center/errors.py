"""Errors raised by the Locking-Center clients.

Every error derives from :class:`LockingCenterError`, so ``except
LockingCenterError`` catches anything the client itself raises.  The
subclasses tell the outcomes of a request apart::

    LockingCenterError
    ├── NotWonError             try-lock in scoped form: someone holds the key ('#')
    ├── ResetWhileWaitingError  lock answered '-': the key or source was reset while queued
    ├── RefusedError            unlock / reset / try-lock answered '-'
    │   └── InvalidRequestError key or source refused before anything was sent (also ValueError)
    ├── UnreachableError        connect failed or timed out, or no answer came back (also ConnectionError)
    ├── LockTimeoutError        gave up waiting after ``timeout`` seconds (also TimeoutError)
    ├── LockCancelledError      gave up waiting because the ``cancel`` event was set
    ├── ProtocolError           the server answered a byte the protocol does not allow
    │
    │   sessions only:
    ├── NotHeldError            (also RefusedError) unlock: this session does not hold that grant
    ├── OutcomeUnknownError     an unlock or reset (or a try-lock, past answer_timeout) lost its answer
    ├── DisconnectedError       (also ConnectionError) the connection broke before the answer
    │                           to a Ping or Close; the session resumes (a lock is reissued)
    ├── SessionLostError        the session ended without close(): every hold it had is gone
    └── SessionClosedError      the session was closed by close()
"""

from __future__ import annotations

__all__ = [
    "LockingCenterError",
    "NotWonError",
    "ResetWhileWaitingError",
    "RefusedError",
    "InvalidRequestError",
    "UnreachableError",
    "LockTimeoutError",
    "LockCancelledError",
    "ProtocolError",
    "NotHeldError",
    "OutcomeUnknownError",
    "DisconnectedError",
    "SessionLostError",
    "SessionClosedError",
]


class LockingCenterError(Exception):
    """Base class of every error raised by this package."""


class NotWonError(LockingCenterError):
    """A try-lock found the key held by someone (answer ``#``).

    Only the scoped forms (``lock_nowait``) raise it; ``try_lock`` returns
    ``False`` instead.
    """


class ResetWhileWaitingError(LockingCenterError):
    """A lock request was answered ``-``.

    The key (ResetByKey) or the waiter's source (ResetBySource) was reset
    while the request waited, or the server could not make the grant
    durable, or it refused the connection at its connection limit.  The key
    is not held by this request.
    """


class RefusedError(LockingCenterError):
    """The server answered ``-`` to an unlock, a reset or a try-lock.

    For unlock it means the key was not held.
    """


class InvalidRequestError(RefusedError, ValueError):
    """The key or source was refused by the client before any connection.

    Keys are 1..127 bytes and sources 0..127 bytes, counted after UTF-8
    encoding.
    """


class UnreachableError(LockingCenterError, ConnectionError):
    """The server could not be reached or closed the connection unanswered.

    Raised when connecting fails or exceeds ``connect_timeout``, when the
    connection breaks, or when a non-waiting request gets no answer within
    ``io_timeout``.
    """


class LockTimeoutError(LockingCenterError, TimeoutError):
    """The lock was not granted within the ``timeout`` given to the call.

    The connection was closed, so the server withdrew the waiter.
    """


class LockCancelledError(LockingCenterError):
    """The ``cancel`` event was set while the lock request waited.

    With :class:`~locking_center.Client` the connection was closed; with a
    session a Cancel was sent.  Either way the server withdrew the waiter,
    and a grant that crossed the give-up was unlocked again: nothing is held.
    """


class ProtocolError(LockingCenterError):
    """The server answered with a byte that is not valid for the request."""


class NotHeldError(RefusedError):
    """A session's unlock was answered ``-``: the session does not hold that
    grant (it was reset, released already, or belongs to someone else).
    Nothing was released."""


class OutcomeUnknownError(LockingCenterError):
    """An unlock or a reset whose frame may have reached the server, but
    whose answer never came (the connection broke, or the call was given up
    after sending), or a session's try-lock with no answer within its
    ``answer_timeout`` (a grant that comes later is given back).  It may or
    may not have taken effect.

    It is never sent again blindly.  A session settles a lost unlock after
    its resume with an unlock naming the grant's token, which cannot release
    anything but that grant.
    """


class DisconnectedError(LockingCenterError, ConnectionError):
    """A session's Ping or Close was sent on a connection that broke before
    its answer came.  The session goes on resuming.  A lock or try-lock is
    not failed by a drop: it is reissued with its id after the resume (and
    finds the grant the server made for it, if it made one); an unlock or a
    reset raises :class:`OutcomeUnknownError` instead."""


class SessionLostError(LockingCenterError):
    """The session ended without :meth:`close`: the server refused to resume
    it (it expired, was ended from the dashboard, or the server restarted
    without its log), or its TTL passed before a resume succeeded.

    Every hold it had is gone, or goes at the server's expiry: stop using
    what those locks protected.  Every later call on the session raises it.
    """


class SessionClosedError(LockingCenterError):
    """The session was closed by :meth:`close`; calls made after it raise this."""
