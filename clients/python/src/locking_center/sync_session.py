"""Session: the blocking, thread-safe face of :class:`~locking_center.AsyncSession`.

One protocol implementation serves both APIs.  A :class:`Session` owns one
event-loop thread that runs an :class:`AsyncSession`; every method hands a
coroutine to that loop and blocks on its outcome, so any number of threads
may call it at once and the session's state is only ever touched by the
loop thread.  (Two implementations — one with locks and threads, one on
asyncio — would be two places for the give-back and resume rules to drift
apart.)  The loop thread is started by the constructor and ended by
:meth:`Session.close` (or leaving the ``with`` block).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl as _ssl
import threading
from types import TracebackType
from typing import Any, Coroutine, Optional, Type, TypeVar

from ._dial import Addresses
from ._protocol import Text
from .cancel import CancelEvent, check_cancel
from .errors import LockCancelledError, LockingCenterError, SessionClosedError, SessionLostError
from .session import DEFAULT_ANSWER_TIMEOUT, AsyncGrant, AsyncSession

__all__ = ["Session", "Grant"]

T = TypeVar("T")


class Grant:
    """A key held through a :class:`Session`, with the grant's fencing token.

    ``with session.lock(k) as grant:`` unlocks when the block ends.  A thread
    cannot be interrupted, so a session lost while the block runs is
    reported when it ends: the block raises :class:`SessionLostError` (with
    the block's own exception, if any, as its ``__cause__``).  Long blocks
    can look at :attr:`held` or :attr:`Session.done` as they go.
    """

    __slots__ = ("_session", "_grant")

    def __init__(self, session: "Session", grant: AsyncGrant) -> None:
        self._session = session
        self._grant = grant

    @property
    def key(self) -> Text:
        """The key, as it was given to ``lock``."""
        return self._grant.key

    @property
    def token(self) -> int:
        """The grant's fencing token: pass it to the resources the lock protects."""
        return self._grant.token

    @property
    def held(self) -> bool:
        """True until :meth:`unlock` ran, or the session ended."""
        return self._grant.held

    def unlock(self) -> None:
        """Release this grant (by its token).  A second call does nothing."""
        self._session._call(self._grant.unlock())

    def __enter__(self) -> "Grant":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        err = self._session.error
        if isinstance(err, SessionLostError):
            raise SessionLostError(str(err)) from exc
        if exc_type is None:
            self.unlock()
            return
        try:
            self.unlock()
        except LockingCenterError:  # keep the block's own exception
            pass

    def __repr__(self) -> str:
        return "Grant(key=%r, token=%d, held=%r)" % (self.key, self.token, self.held)


class Session:
    """A Locking-Center session for threads: opened by the constructor.

    ::

        with Session("127.0.0.1:22119", ttl=10, source="billing") as session:
            with session.lock("invoices/2026-11", timeout=30) as grant:
                write_invoices(fence=grant.token)

    Parameters as for :class:`AsyncSession`.  Safe for use by many threads;
    ``lock`` calls from several threads wait on the one connection at once.

    :raises UnreachableError: no connection, or no answer in time.
    :raises RefusedError: the server refused the session.
    """

    def __init__(
        self,
        address: Optional[Addresses] = None,
        *,
        ttl: Optional[float] = None,
        source: Text = "",
        auth_token: Text = "",
        connect_timeout: float = 5.0,
        answer_timeout: Optional[float] = DEFAULT_ANSWER_TIMEOUT,
        ssl: Optional[_ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
    ) -> None:
        self._async = AsyncSession(
            address,
            ttl=ttl,
            source=source,
            auth_token=auth_token,
            connect_timeout=connect_timeout,
            answer_timeout=answer_timeout,
            ssl=ssl,
            server_hostname=server_hostname,
        )
        # Guards _stopped: no coroutine is handed to the loop once it stops.
        self._lock = threading.Lock()
        self._stopped = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="locking-center-session", daemon=True)
        self._thread.start()
        #: Resolved when the session ends, with the reason as its result: a
        #: :class:`SessionLostError` (its holds are gone) or a
        #: :class:`SessionClosedError`.  It never raises.
        self.done: "concurrent.futures.Future[BaseException]" = concurrent.futures.Future()
        try:
            self._call(self._async.open())
        except BaseException:
            self._stop()
            raise
        self._loop.call_soon_threadsafe(self._async.done.add_done_callback, self._mirror_done)

    def _mirror_done(self, fut: "asyncio.Future[BaseException]") -> None:
        if not self.done.done():
            self.done.set_result(fut.result())

    # -- life ------------------------------------------------------------------

    def close(self, timeout: Optional[float] = None) -> None:
        """End the session (see :meth:`AsyncSession.close`) and its thread."""
        with self._lock:
            if self._stopped:
                return
        try:
            self._call(self._async.close(timeout))
        finally:
            self._stop()

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()
        err = self._async.error
        if exc_type is None and isinstance(err, SessionLostError):
            raise SessionLostError(str(err))

    def _stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        if not self.done.done():
            self.done.set_result(self._async.error or SessionClosedError("session closed"))

    # -- what the program sees -------------------------------------------------

    @property
    def id(self) -> int:
        """The session id (the JSON API writes it ``"%016x" % id``)."""
        return self._async.id

    @property
    def ttl(self) -> float:
        """The TTL the server granted, in seconds."""
        return self._async.ttl

    @property
    def address(self) -> str:
        """The address the session is (or was last) connected to."""
        return self._async.address

    @property
    def error(self) -> Optional[LockingCenterError]:
        """``None`` while the session lives, else why it ended."""
        return self._async.error

    def lock(self, key: Text, *, timeout: Optional[float] = None, cancel: Optional[CancelEvent] = None) -> Grant:
        """Wait for ``key`` in FIFO order and hold it; see :meth:`AsyncSession.lock`.

        :param timeout: seconds to wait at most, then :class:`LockTimeoutError`.
        :param cancel: a :class:`CancelEvent`; setting it from another thread
            gives up at once with :class:`LockCancelledError`.
        """
        check_cancel(cancel)
        return Grant(self, self._call(self._async.lock(key, timeout=timeout), cancel))

    def try_lock(self, key: Text) -> Optional[Grant]:
        """Take ``key`` if nobody holds it now; the grant, or ``None``."""
        grant = self._call(self._async.try_lock(key))
        return None if grant is None else Grant(self, grant)

    def lock_nowait(self, key: Text) -> Grant:
        """Scoped try-lock.  :raises NotWonError: someone holds the key."""
        return Grant(self, self._call(self._async.lock_nowait(key)))

    def unlock(self, key: Text, token: int = 0) -> int:
        """See :meth:`AsyncSession.unlock`."""
        return self._call(self._async.unlock(key, token))

    def wait(self, key: Text, *, timeout: Optional[float] = None, cancel: Optional[CancelEvent] = None) -> None:
        """Wait for one's turn on ``key``: lock it, then unlock it at once."""
        self.lock(key, timeout=timeout, cancel=cancel).unlock()

    def reset_by_key(self, key: Text) -> None:
        """See :meth:`AsyncSession.reset_by_key`."""
        self._call(self._async.reset_by_key(key))

    def reset_by_source(self, source: Optional[Text] = None) -> None:
        """See :meth:`AsyncSession.reset_by_source`."""
        self._call(self._async.reset_by_source(source))

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncSession", "Session", 1)

    # -- the bridge to the loop thread -------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], cancel: Optional[CancelEvent] = None) -> T:
        """Run ``coro`` on the loop thread and wait for its outcome.

        Cancelling (the event, or KeyboardInterrupt in the waiting thread)
        cancels the task: the session then sends Cancel and gives back a
        grant that crossed it.  The task's own outcome is what is returned, so
        a grant that came before the cancellation stands.
        """
        result: "concurrent.futures.Future[T]" = concurrent.futures.Future()
        task_box: list = []

        def start() -> None:
            task = self._loop.create_task(coro)
            task_box.append(task)
            task.add_done_callback(lambda t: _copy(t, result))

        def cancel_task() -> None:
            if task_box:
                task_box[0].cancel()

        with self._lock:
            if self._stopped:
                coro.close()
                raise self._async.error or SessionClosedError("session closed")
            self._loop.call_soon_threadsafe(start)
        fire = lambda: self._loop.call_soon_threadsafe(cancel_task)  # noqa: E731
        if cancel is not None:
            cancel._add(fire)
        try:
            return result.result()
        except concurrent.futures.CancelledError:
            if cancel is not None and cancel.is_set():
                raise LockCancelledError("lock request cancelled") from None
            raise
        except BaseException:
            if not result.done():  # KeyboardInterrupt or the like: give the request up
                with self._lock:
                    if not self._stopped:
                        self._loop.call_soon_threadsafe(cancel_task)
                result.add_done_callback(self._give_back)
            raise
        finally:
            if cancel is not None:
                cancel._remove(fire)

    def _give_back(self, fut: "concurrent.futures.Future[Any]") -> None:
        """A grant won by a call whose thread stopped waiting: unlock it."""
        if fut.cancelled() or fut.exception() is not None:
            return
        grant = fut.result()
        if isinstance(grant, AsyncGrant):
            with self._lock:
                if not self._stopped:
                    asyncio.run_coroutine_threadsafe(grant.unlock(), self._loop)


def _copy(task: "asyncio.Task[T]", result: "concurrent.futures.Future[T]") -> None:
    if task.cancelled():
        result.cancel()
        result.set_running_or_notify_cancel()
    elif task.exception() is not None:
        result.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        result.set_result(task.result())
