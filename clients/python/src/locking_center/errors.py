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
    └── ProtocolError           the server answered a byte the protocol does not allow
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

    The connection was closed, so the server withdrew the waiter.
    """


class ProtocolError(LockingCenterError):
    """The server answered with a byte that is not valid for the request."""
