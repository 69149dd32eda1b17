"""asyncio client: one TCP connection per request.

Cancelling the task that awaits a lock hangs up its connection, so the
server withdraws the waiter; a grant that crossed the hang-up is unlocked
again.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Optional, Type

from . import _dial
from . import _protocol as proto
from ._holding import AwaitableHold
from ._protocol import Action, Text
from .client import _HANG_UP_GRACE, _ClientBase
from .errors import (
    LockingCenterError,
    NotWonError,
    RefusedError,
    ResetWhileWaitingError,
    UnreachableError,
)

__all__ = ["AsyncClient", "AsyncHeldLock"]


class AsyncHeldLock:
    """A key this client was granted; an async context manager that unlocks on exit."""

    __slots__ = ("_client", "key", "_held")

    def __init__(self, client: "AsyncClient", key: Text) -> None:
        self._client = client
        self.key = key
        self._held = True

    @property
    def held(self) -> bool:
        return self._held

    async def unlock(self) -> None:
        """Release the key.  A second call does nothing."""
        if not self._held:
            return
        self._held = False
        await self._client.unlock(self.key)

    async def __aenter__(self) -> "AsyncHeldLock":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is None:
            await self.unlock()
            return
        try:
            await self.unlock()
        except Exception:  # keep the block's own exception
            pass

    def __repr__(self) -> str:
        return "AsyncHeldLock(key=%r, held=%r)" % (self.key, self._held)


class _Acquire(AwaitableHold[AsyncHeldLock]):
    """What ``AsyncClient.lock`` returns: a coroutine that is also an async context manager.

    ``await client.lock(k)`` (or ``asyncio.create_task(client.lock(k))``)
    gives an :class:`AsyncHeldLock`; ``async with client.lock(k):`` holds
    the key for the block.
    """

    __slots__ = ()


class AsyncClient(_ClientBase):
    """asyncio Locking-Center client; same parameters as :class:`Client`."""

    def lock(self, key: Text, *, timeout: Optional[float] = None) -> _Acquire:
        """Wait for the key in FIFO order and hold it.

        ``await client.lock(k)`` returns an :class:`AsyncHeldLock`;
        ``async with client.lock(k):`` unlocks when the block ends.  The key
        is checked at once, before anything is awaited.

        :param timeout: seconds to wait at most, then :class:`LockTimeoutError`.
            Cancelling the awaiting task gives up too.
        :raises ResetWhileWaitingError: the key or source was reset meanwhile.
        """
        frame = proto.encode_frame(Action.LOCK, key, self._source)

        async def acquire() -> AsyncHeldLock:
            answer = await self._request(frame, timeout=timeout, waiting=True)
            if proto.check_answer(answer, (proto.OK, proto.FAIL)) == proto.FAIL:
                raise ResetWhileWaitingError("lock %r was answered '-': reset while waiting" % (key,))
            return AsyncHeldLock(self, key)

        return _Acquire(acquire())

    async def try_lock(self, key: Text) -> bool:
        """Take the key if it is free right now; ``False`` if anyone holds it."""
        frame = proto.encode_frame(Action.TRY_LOCK, key, self._source)
        answer = proto.check_answer(await self._request(frame), (proto.OK, proto.FAIL, proto.NOT_WON))
        if answer == proto.FAIL:
            raise RefusedError("try-lock %r was refused" % (key,))
        return answer == proto.OK

    def lock_nowait(self, key: Text) -> _Acquire:
        """Scoped try-lock; raises :class:`NotWonError` when the key is held."""
        proto.encode_key(key)  # refuse a bad key now, before anything is awaited

        async def acquire() -> AsyncHeldLock:
            if not await self.try_lock(key):
                raise NotWonError("key %r is held by someone else" % (key,))
            return AsyncHeldLock(self, key)

        return _Acquire(acquire())

    async def unlock(self, key: Text) -> None:
        """Release the key.  :raises RefusedError: it was not held."""
        await self._expect_ok(proto.encode_frame(Action.UNLOCK, key, self._source), "unlock %r" % (key,))

    async def wait(self, key: Text, *, timeout: Optional[float] = None) -> None:
        """Wait for one's turn on the key: lock it, then unlock it at once."""
        held = await self.lock(key, timeout=timeout)
        await held.unlock()

    async def reset_by_key(self, key: Text) -> None:
        """Drop the key's holder; every waiter on it gets '-'."""
        await self._expect_ok(proto.encode_frame(Action.RESET_BY_KEY, key, self._source), "reset of key %r" % (key,))

    async def reset_by_source(self, source: Optional[Text] = None) -> None:
        """Fail every waiter of ``source`` and release every key it holds."""
        src = self._source if source is None else source
        await self._expect_ok(proto.encode_frame(Action.RESET_BY_SOURCE, b"", src), "reset of source %r" % (src,))

    async def _expect_ok(self, frame: bytes, what: str) -> None:
        if proto.check_answer(await self._request(frame), (proto.OK, proto.FAIL)) == proto.FAIL:
            raise RefusedError("%s was refused" % what)

    async def _request(self, frame: bytes, *, timeout: Optional[float] = None, waiting: bool = False) -> int:
        """Connect, send ``frame`` in one write, read one byte, close."""
        if not waiting:
            timeout = self.io_timeout
        deadline = None if timeout is None else time.monotonic() + timeout

        connect_timeout = self.connect_timeout
        if deadline is not None:
            connect_timeout = min(connect_timeout, max(deadline - time.monotonic(), 0.0))
        try:
            reader, writer, _ = await _dial.connect_async(
                self._targets, connect_timeout, self._tls, self._server_hostname, deadline
            )
        except TimeoutError as e:
            raise self._expired(timeout, waiting) from e

        answered = False
        try:
            writer.write(frame)
            try:
                await writer.drain()
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                data = await asyncio.wait_for(reader.read(1), remaining)
            except asyncio.TimeoutError as e:
                why = self._expired(timeout, waiting)
                why.__cause__ = e
                raise await self._give_up(reader, writer, frame, why)
            except asyncio.CancelledError as e:
                raise await self._give_up(reader, writer, frame, e)
            except OSError as e:
                raise UnreachableError("connection to %s broke: %s" % (self.address, e)) from e
            if not data:
                raise UnreachableError("%s closed the connection without an answer" % self.address)
            answered = True
            return data[0]
        finally:
            if answered:
                writer.close()
                try:
                    await writer.wait_closed()
                except OSError:
                    pass
            else:
                # Timeout, cancellation (hung up already) or a broken
                # connection: drop it now so the server sees the hang-up.
                writer.transport.abort()

    async def _give_up(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes, why: BaseException
    ) -> BaseException:
        """Hang up a request given up; return ``why`` (see :meth:`_ClientBase._give_back_frame`)."""
        unlock = self._give_back_frame(frame)
        if unlock is None or self._tls is not None:  # no half-close over TLS
            return why
        try:
            writer.write_eof()
            granted = await asyncio.wait_for(reader.read(1), _HANG_UP_GRACE) == bytes((proto.OK,))
        except (OSError, asyncio.TimeoutError):  # closed, reset or silent: no grant came back
            return why
        if granted:
            try:
                await self._expect_ok(unlock, self._GIVE_BACK_WHAT)
            except LockingCenterError as e:
                why.__cause__ = e
        return why
