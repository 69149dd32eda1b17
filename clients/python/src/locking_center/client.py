"""Blocking client: one TCP connection per request."""

from __future__ import annotations

import os
import socket
import ssl as _ssl
import threading
import time
from types import TracebackType
from typing import Optional, Type

from . import _dial
from . import _protocol as proto
from ._dial import Addresses
from ._protocol import Action, Text
from .cancel import CancelEvent, check_cancel
from .errors import (
    LockCancelledError,
    LockingCenterError,
    LockTimeoutError,
    NotWonError,
    RefusedError,
    ResetWhileWaitingError,
    UnreachableError,
)

__all__ = ["Client", "HeldLock"]

# How long a request given up still reads after closing its write side.
_HANG_UP_GRACE = 2.0


def _default_address() -> str:
    return os.environ.get("LC_ADDRESS") or "localhost:%d" % proto.DEFAULT_PORT


class _ClientBase:
    """What :class:`Client` and :class:`~locking_center.AsyncClient` share:
    the servers' addresses, TLS, the source and the timeouts."""

    def __init__(
        self,
        address: Optional[Addresses] = None,
        source: Text = "",
        *,
        connect_timeout: float = 5.0,
        io_timeout: Optional[float] = 30.0,
        ssl: Optional[_ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
    ) -> None:
        self._targets = _dial.parse_addresses(address if address is not None else _default_address())
        self._source = source
        proto.encode_source(source)  # refuse a bad source now, not at first use
        if ssl is not None and not isinstance(ssl, _ssl.SSLContext):
            raise TypeError("ssl must be an ssl.SSLContext, not %s" % type(ssl).__name__)
        self._tls = ssl
        self._server_hostname = server_hostname
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout

    @property
    def address(self) -> str:
        """The addresses, comma-separated."""
        return _dial.describe(self._targets)

    @property
    def source(self) -> Text:
        return self._source

    def __repr__(self) -> str:
        return "%s(address=%r, source=%r)" % (type(self).__name__, self.address, self._source)

    def _expired(self, timeout: Optional[float], waiting: bool) -> BaseException:
        """The error of a request past its deadline: a lock not granted within
        ``timeout``, or a server silent past ``io_timeout``."""
        if waiting:
            return LockTimeoutError("not granted within %ss" % (timeout,))
        return UnreachableError("no answer from %s within %ss" % (self.address, timeout))

    # What the give-back Unlock is called in its RefusedError.
    _GIVE_BACK_WHAT = "unlock of a key granted as the request gave up"

    @staticmethod
    def _give_back_frame(frame: bytes) -> Optional[bytes]:
        """The Unlock giving back a grant of ``frame``'s request (same key and
        source), or None when that request grants nothing.

        Each client's ``_give_up`` hangs up a request given up after its frame
        was sent, and returns ``why``, the reason it was given up.  Only the
        write side is closed: the server reads EOF and withdraws the waiter,
        while a '+' it sent just before it noticed is still read, for at most
        ``_HANG_UP_GRACE`` seconds.  Such a Lock or TryLock grant is unlocked
        again with this frame; if that unlock fails, its error becomes
        ``why``'s cause instead of replacing it.
        """
        if frame[0] not in (Action.LOCK, Action.TRY_LOCK):
            return None
        return bytes((Action.UNLOCK,)) + frame[1:]


class HeldLock:
    """A key this client was granted; a context manager that unlocks on exit.

    Returned by :meth:`Client.lock` and :meth:`Client.lock_nowait`.  Leaving
    the ``with`` block unlocks the key.  If the block raised, an unlock
    failure is swallowed so the block's own exception propagates.
    """

    __slots__ = ("_client", "key", "_held")

    def __init__(self, client: "Client", key: Text) -> None:
        self._client = client
        self.key = key
        self._held = True

    @property
    def held(self) -> bool:
        """True until :meth:`unlock` has been called (or the block left)."""
        return self._held

    def unlock(self) -> None:
        """Release the key.  A second call does nothing."""
        if not self._held:
            return
        self._held = False
        self._client.unlock(self.key)

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is None:
            self.unlock()
            return
        try:
            self.unlock()
        except Exception:  # keep the block's own exception
            pass

    def __repr__(self) -> str:
        return "HeldLock(key=%r, held=%r)" % (self.key, self._held)


class Client(_ClientBase):
    """Blocking Locking-Center client.

    :param address: ``host:port`` of the server, or of several (a
        cluster's nodes): ``"a:22119,b:22119,c:22119"`` or a list; a name
        with several DNS records counts as several (default
        ``$LC_ADDRESS``, then ``localhost:22119``).  Each request connects
        to the first that answers, tried in a random order.
    :param source: who is asking, 0..127 bytes; empty lets the server use
        this machine's IP address.
    :param connect_timeout: seconds allowed for each connection attempt.
    :param io_timeout: seconds allowed for a non-waiting request (unlock,
        try-lock, resets) to be answered; ``None`` waits forever.
    :param ssl: an :class:`ssl.SSLContext` for a server with ``TLS_CERT``
        (``ssl.create_default_context(cafile=...)``, plus
        ``load_cert_chain`` for one with ``TLS_CLIENT_CA``); ``None``: plain TCP.
    :param server_hostname: the name the server's certificate must carry
        (default: the host of the address connected to).

    The client keeps no connection open between calls and can be shared
    between threads.  Over TLS, a lock given up (``timeout``, ``cancel``)
    closes its connection at once: Python's TLS has no half-close, so a
    grant that crossed the give-up cannot be read back and stays held
    until it is unlocked or reset — use a session, whose Cancel has no
    such gap.
    """

    # -- the six requests -------------------------------------------------

    def lock(
        self,
        key: Text,
        *,
        timeout: Optional[float] = None,
        cancel: Optional[CancelEvent] = None,
    ) -> HeldLock:
        """Wait for the key in FIFO order and hold it.

        Returns a :class:`HeldLock`; use it as ``with client.lock(key):`` to
        unlock when the block ends, or call its ``unlock()``.

        :param timeout: seconds to wait at most; then the connection is closed
            (the server withdraws the waiter) and :class:`LockTimeoutError`
            is raised.
        :param cancel: a :class:`CancelEvent`; setting it from another
            thread gives up the wait at once with :class:`LockCancelledError`.
        :raises ResetWhileWaitingError: the key or source was reset meanwhile.
        """
        frame = proto.encode_frame(Action.LOCK, key, self._source)
        answer = self._request(frame, timeout=timeout, cancel=cancel, waiting=True)
        if proto.check_answer(answer, (proto.OK, proto.FAIL)) == proto.FAIL:
            raise ResetWhileWaitingError("lock %r was answered '-': reset while waiting" % (key,))
        return HeldLock(self, key)

    def try_lock(self, key: Text) -> bool:
        """Take the key if it is free right now; ``False`` if anyone holds it."""
        frame = proto.encode_frame(Action.TRY_LOCK, key, self._source)
        answer = proto.check_answer(self._request(frame), (proto.OK, proto.FAIL, proto.NOT_WON))
        if answer == proto.FAIL:
            raise RefusedError("try-lock %r was refused" % (key,))
        return answer == proto.OK

    def lock_nowait(self, key: Text) -> HeldLock:
        """Scoped try-lock: like :meth:`try_lock` but returns a :class:`HeldLock`.

        :raises NotWonError: someone holds the key.
        """
        if not self.try_lock(key):
            raise NotWonError("key %r is held by someone else" % (key,))
        return HeldLock(self, key)

    def unlock(self, key: Text) -> None:
        """Release the key.  :raises RefusedError: it was not held."""
        frame = proto.encode_frame(Action.UNLOCK, key, self._source)
        self._expect_ok(frame, "unlock %r" % (key,))

    def wait(
        self,
        key: Text,
        *,
        timeout: Optional[float] = None,
        cancel: Optional[CancelEvent] = None,
    ) -> None:
        """Wait for one's turn on the key: lock it, then unlock it at once."""
        self.lock(key, timeout=timeout, cancel=cancel).unlock()

    def reset_by_key(self, key: Text) -> None:
        """Drop the key's holder; every waiter on it gets '-'."""
        frame = proto.encode_frame(Action.RESET_BY_KEY, key, self._source)
        self._expect_ok(frame, "reset of key %r" % (key,))

    def reset_by_source(self, source: Optional[Text] = None) -> None:
        """Fail every waiter of ``source`` and release every key it holds.

        ``source`` defaults to this client's own source (empty: the server
        uses this machine's IP address).
        """
        src = self._source if source is None else source
        frame = proto.encode_frame(Action.RESET_BY_SOURCE, b"", src)
        self._expect_ok(frame, "reset of source %r" % (src,))

    # -- transport ----------------------------------------------------------

    def _expect_ok(self, frame: bytes, what: str) -> None:
        if proto.check_answer(self._request(frame), (proto.OK, proto.FAIL)) == proto.FAIL:
            raise RefusedError("%s was refused" % what)

    def _request(
        self,
        frame: bytes,
        *,
        timeout: Optional[float] = None,
        cancel: Optional[CancelEvent] = None,
        waiting: bool = False,
    ) -> int:
        """Connect, send ``frame`` in one write, read one byte, close."""
        check_cancel(cancel)
        if cancel is not None and cancel.is_set():
            raise LockCancelledError("lock request cancelled")
        if not waiting:
            timeout = self.io_timeout
        deadline = None if timeout is None else time.monotonic() + timeout

        connect_timeout = self.connect_timeout
        if deadline is not None:
            connect_timeout = min(connect_timeout, deadline - time.monotonic())
            if connect_timeout <= 0:
                raise self._expired(timeout, waiting)
        try:
            sock, where = _dial.connect(self._targets, connect_timeout, self._tls, self._server_hostname, deadline)
        except socket.timeout as e:
            raise self._expired(timeout, waiting) from e

        with sock:
            try:
                sock.sendall(frame)
            except OSError as e:
                raise UnreachableError("sending to %s failed: %s" % (self.address, e)) from e
            if cancel is None:
                return self._read_answer(sock, frame, deadline, timeout, waiting)
            # Setting the event hangs up at once, from the thread that sets
            # it: the write side is shut, so the server withdraws the waiter
            # and closes, which ends the recv below; a grant that crossed the
            # hang-up is read and given back.  A timer bounds the grace.
            cancelled = threading.Event()
            grace = threading.Timer(_HANG_UP_GRACE, _shut, (sock, socket.SHUT_RDWR))
            grace.daemon = True

            def hang_up() -> None:
                cancelled.set()
                if self._tls is not None:  # no half-close over TLS: hang up entirely
                    _shut(sock, socket.SHUT_RDWR)
                    return
                _shut(sock, socket.SHUT_WR)
                grace.start()

            cancel._add(hang_up)
            try:
                answer = self._read_answer(sock, frame, deadline, timeout, waiting, cancelled)
            finally:
                cancel._remove(hang_up)
                grace.cancel()
            if not cancelled.is_set():
                return answer
            why = LockCancelledError("lock request cancelled")
            if answer == proto.OK and self._give_back_frame(frame) is not None:
                try:
                    self._expect_ok(self._give_back_frame(frame), self._GIVE_BACK_WHAT)  # type: ignore[arg-type]
                except LockingCenterError as e:
                    why.__cause__ = e
            raise why

    def _read_answer(
        self,
        sock: socket.socket,
        frame: bytes,
        deadline: Optional[float],
        timeout: Optional[float],
        waiting: bool,
        cancelled: Optional[threading.Event] = None,
    ) -> int:
        """Read the one-byte answer; a cancelled wait returns what the
        hang-up left to read (-1 for nothing)."""
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            raise self._give_up(sock, frame, self._expired(timeout, waiting))
        sock.settimeout(wait)
        try:
            data = sock.recv(1)
        except socket.timeout:
            data = None  # given up below, outside the handler: _give_up chains its own cause
        except OSError as e:
            if cancelled is not None and cancelled.is_set():
                return -1
            raise UnreachableError("connection to %s broke: %s" % (self.address, e)) from e
        if data is None:
            if cancelled is not None and cancelled.is_set():
                return -1
            raise self._give_up(sock, frame, self._expired(timeout, waiting))
        if not data:
            if cancelled is not None and cancelled.is_set():
                return -1
            raise UnreachableError("%s closed the connection without an answer" % self.address)
        return data[0]

    def _give_up(self, sock: socket.socket, frame: bytes, why: BaseException) -> BaseException:
        """Hang up a request given up; return ``why`` (see :meth:`_ClientBase._give_back_frame`)."""
        unlock = self._give_back_frame(frame)
        if unlock is None or self._tls is not None:  # no half-close over TLS
            return why
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(_HANG_UP_GRACE)
            granted = sock.recv(1) == bytes((proto.OK,))
        except OSError:  # closed, reset or silent: no grant came back
            return why
        if granted:
            try:
                self._expect_ok(unlock, self._GIVE_BACK_WHAT)
            except LockingCenterError as e:
                why.__cause__ = e
        return why


def _shut(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:  # already closed: the request has ended anyway
        pass
