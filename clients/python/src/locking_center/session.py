"""Sessions on asyncio: one connection, many requests, holds that end with their holder.

A session (docs/protocol.md, "Sessions") is one TCP connection carrying the
requests of many tasks at once, answered out of order by id.  It owns the
keys it takes: they are released when it closes, when the server ends it, or
one TTL after the server last heard from it — so a crashed program's keys
free themselves.  Every grant comes with a fencing token.

How this implementation keeps the protocol's promises:

- Everything runs on one event loop, so the session's state needs no lock.
  One writer task gathers every queued request into one write and sends
  Ping when nothing was sent for a third of the TTL; one reader task
  matches each 13-byte answer to its call by id; one supervisor task owns
  the connection, and resumes the session on a new one when it drops.
- A call that gives up (a timeout, a cancelled task) after its Lock was
  sent sends Cancel and keeps the id pending; a grant that crossed the
  Cancel is unlocked again by its token.  An error from ``lock`` therefore
  always means nothing is held.
- A session is given one address or several (a cluster's nodes, a DNS
  name with a record per node).  It connects to any that answers, tried in
  a random order: every node of a cluster forwards to the leader.
- When the connection drops (the node died, or stopped leading and closed
  its clients' connections), the session resumes on any node, in rounds
  with a growing, jittered back-off, for as long as its TTL allows.  Every
  Lock and TryLock that was pending on the lost connection is sent again
  after the resume with its old id, before anything else, in the order
  they were first sent: the server answers a grant it made for that
  request at once with its token (Reissue, docs/protocol.md), so a grant
  whose answer was lost is returned, not waited for; otherwise the request
  is carried out anew and its caller just goes on waiting.  The id of a
  grant the program holds is never given to another request.  An unlock or
  reset whose answer was lost raises :class:`OutcomeUnknownError` and is
  never sent again (a lost unlock is settled after the resume by an Unlock
  naming its token, which cannot release anything else); a Ping or Close
  raises :class:`DisconnectedError`.  A Lock or TryLock whose caller gave up
  may have been granted: after the resume it is unlocked again, so no key
  is left held by nobody.
- The holds are certain until the send time of the last answered request
  plus the TTL.  When that passes without a resume, or the server refuses
  the resume, the session is lost: :attr:`AsyncSession.done` resolves with a
  :class:`SessionLostError`, every pending and later call raises it, and a
  scoped hold (``async with``) is cancelled and raises it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl as _ssl
import time
from types import TracebackType
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Type, Union

from . import _dial
from . import _protocol as proto
from ._dial import Addresses
from ._holding import AwaitableHold
from ._protocol import SessionAction as A, SessionAnswer, Text
from .errors import (
    DisconnectedError,
    LockingCenterError,
    LockTimeoutError,
    NotHeldError,
    NotWonError,
    OutcomeUnknownError,
    ProtocolError,
    RefusedError,
    ResetWhileWaitingError,
    SessionClosedError,
    SessionLostError,
    UnreachableError,
)

__all__ = ["AsyncSession", "AsyncGrant", "DEFAULT_ANSWER_TIMEOUT"]

log = logging.getLogger("locking_center")

#: Seconds a request other than Lock waits for its answer by default (the
#: same in every Locking-Center client).  A Lock waits as long as asked.
DEFAULT_ANSWER_TIMEOUT = 30.0

# The server's bound on requests awaiting an answer on one connection; one
# more drops the connection.  Cancel is never pending.
_MAX_PENDING = 1024
# Back-off between resume attempts: the first is immediate, then this,
# doubling up to the maximum, each scaled by a random factor in [0.5, 1].
_MIN_BACKOFF = 0.05
_MAX_BACKOFF = 1.0
# TCP keepalive on a session connection, as the server sets it on its side.
_KEEPALIVE = (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 4))

_Result = Union[SessionAnswer, BaseException]


class _Call:
    """One request of the session, from its queueing to its answer."""

    __slots__ = (
        "action", "key", "token", "id", "sent", "sent_at", "reissue", "dropped", "gave_up", "finished", "future", "internal",
    )

    def __init__(
        self,
        action: A,
        key: bytes = b"",
        token: int = 0,
        future: "Optional[asyncio.Future[SessionAnswer]]" = None,
        internal: Optional[Callable[[_Result], None]] = None,
    ) -> None:
        self.action = action
        self.key = key
        # The request's token (Unlock), or for a Cancel the id of its Lock.
        self.token = token
        self.id = 0  # given when the writer takes the call
        self.sent = False
        self.sent_at = 0.0
        # A Lock or TryLock sent on a connection lost before its answer: it
        # is sent again after the resume with the same id (Reissue).
        self.reissue = False
        self.dropped = False  # given up before it was sent: the writer skips it
        self.gave_up = False  # the caller stopped waiting after it was sent
        self.finished = False  # the caller has its outcome (or gave up)
        self.future = future
        # The session's own calls (Ping, Cancel, give-backs) have no future:
        # their outcome goes to this callback.
        self.internal = internal


class _Stray(NamedTuple):
    """A grant the session may hold that no caller owns; token 0 when unknown."""

    key: bytes
    token: int


def _text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


class AsyncGrant:
    """A key held through a session, with the grant's fencing token.

    ``async with`` it (or the ``session.lock(...)`` call itself) to unlock
    when the block ends.  If the session is lost while the block runs, the
    block's task is cancelled and the block raises :class:`SessionLostError`
    instead of :class:`asyncio.CancelledError` (the way ``asyncio.timeout``
    turns its cancellation into ``TimeoutError``).
    """

    __slots__ = ("_session", "key", "token", "_key", "_held", "_task", "_cancelling", "_cancelled_by_loss")

    def __init__(self, session: "AsyncSession", key: Text, raw: bytes, token: int) -> None:
        self._session = session
        #: The key, as it was given to ``lock``.
        self.key = key
        #: The grant's fencing token: pass it to the resources the lock protects.
        self.token = token
        self._key = raw
        self._held = True
        self._task: Optional[asyncio.Task[Any]] = None
        self._cancelling = 0
        self._cancelled_by_loss = False

    @property
    def held(self) -> bool:
        """True until :meth:`unlock` ran, or the session ended."""
        return self._held and self._session.error is None

    async def unlock(self) -> None:
        """Release this grant (by its token).  A second call does nothing.

        :raises NotHeldError: the grant had already ended (a reset).
        :raises SessionLostError: the session was lost: nothing is held anyway.
        """
        if not self._held:
            return
        self._held = False
        await self._session._unlock(self._key, self.token, self.key)

    def _on_loss(self, _: "asyncio.Future[BaseException]") -> None:
        if self._task is not None and isinstance(self._session.error, SessionLostError):
            self._cancelled_by_loss = True
            self._task.cancel()

    async def __aenter__(self) -> "AsyncGrant":
        task = asyncio.current_task()
        if task is not None:
            self._task = task
            self._cancelling = task.cancelling()
            self._session.done.add_done_callback(self._on_loss)
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self._session.done.remove_done_callback(self._on_loss)
        lost = isinstance(self._session.error, SessionLostError)
        if self._cancelled_by_loss and self._task is not None:
            if self._task.uncancel() > self._cancelling and exc_type is asyncio.CancelledError:
                self._held = False
                return  # someone else cancelled the task too: that cancellation goes on
        if lost:
            self._held = False
            raise self._session._ended_error() from exc
        if exc_type is None:
            await self.unlock()
            return
        try:
            await self.unlock()
        except LockingCenterError:  # keep the block's own exception
            pass

    def __repr__(self) -> str:
        return "AsyncGrant(key=%r, token=%d, held=%r)" % (self.key, self.token, self.held)


class _GrantRequest(AwaitableHold[AsyncGrant]):
    """What :meth:`AsyncSession.lock` returns: a coroutine that is also an
    async context manager (``await`` it for the grant, or ``async with`` it
    to hold the key for the block)."""

    __slots__ = ()


class AsyncSession:
    """A Locking-Center session on asyncio.

    ::

        async with AsyncSession("127.0.0.1:22119", ttl=10, source="billing") as session:
            async with session.lock("invoices/2026-11", timeout=30) as grant:
                write_invoices(fence=grant.token)

    :param address: ``host:port``, or several (a cluster's nodes):
        ``"a:22119,b:22119,c:22119"`` or a list; a name with several DNS
        records counts as several (default ``$LC_ADDRESS``, then
        ``localhost:22119``).  The session connects, and resumes, on any
        that answers, tried in a random order.
    :param ttl: seconds the server keeps the session's holds after it last
        heard from it; ``None`` asks for the server's ``SESSION_TTL``.  The
        server clamps it to 1 s … 10 min; :attr:`ttl` is what it granted.
    :param source: who is asking (0..127 bytes; empty: the server uses the
        peer's IP address).
    :param auth_token: the server's ``AUTH_TOKEN``, when it has one.
    :param connect_timeout: seconds allowed for each attempt to connect
        and open (or resume) on one address.
    :param answer_timeout: seconds a request other than Lock waits for its
        answer (default 30); ``None`` waits as long as the session lives.
    :param ssl: an :class:`ssl.SSLContext` for a server with ``TLS_CERT``
        (``ssl.create_default_context(cafile=...)``, plus
        ``load_cert_chain`` for one with ``TLS_CLIENT_CA``); ``None``: plain TCP.
    :param server_hostname: the name the server's certificate must carry
        (default: the host of the address connected to).

    Nothing is sent until :meth:`open` (or ``async with``).  All methods
    must be called from the event loop the session was opened on; use
    :class:`~locking_center.Session` from threads.
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
        from .client import _default_address

        self._targets = _dial.parse_addresses(address if address is not None else _default_address())
        if ssl is not None and not isinstance(ssl, _ssl.SSLContext):
            raise TypeError("ssl must be an ssl.SSLContext, not %s" % type(ssl).__name__)
        self._tls = ssl
        self._server_hostname = server_hostname
        # The address the current (or last) connection went to.
        self._where = ""
        self._source = source
        self._auth = auth_token
        if ttl is not None and ttl < 0:
            raise ValueError("ttl must be positive (or None for the server's)")
        self._ttl_ms = 0 if ttl is None else min(max(int(round(ttl * 1000)), 1), proto.MAX_ID)
        # Refuse a bad source or auth token now, not at first use.
        proto.encode_open(proto.SESSION_VERSION, self._ttl_ms, 0, source, auth_token)
        self.connect_timeout = connect_timeout
        self.answer_timeout = answer_timeout

        self._id = 0
        self._ttl = 0.0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._done: "Optional[asyncio.Future[BaseException]]" = None
        self._supervisor: "Optional[asyncio.Task[None]]" = None
        self._wake: Optional[asyncio.Event] = None
        self._transport: Optional[asyncio.BaseTransport] = None
        # The calls not yet taken by the writer, in order.
        self._queue: List[_Call] = []
        # The calls written on the current connection awaiting their answer.
        self._pending: Dict[int, _Call] = {}
        self._next_id = 0
        # Every grant the program holds through this session: key to token,
        # and key to the id of the request that made it.
        self._held: Dict[bytes, int] = {}
        self._held_id: Dict[bytes, int] = {}
        # The ids no new request may take: those of the grants the program
        # holds and of the Locks and TryLocks waiting to be reissued.
        # Reissue finds a grant by its request's id, so an id reused while
        # its grant is held would find the wrong request's.
        self._reserved: Set[int] = set()
        # Grants the session may hold that nobody owns, unlocked after a resume.
        self._strays: List[_Stray] = []
        # When the latest answered request was sent (monotonic): the server
        # heard from the session no earlier, so its holds last at least
        # until confirmed + ttl.
        self._confirmed = 0.0
        self._last_sent = 0.0
        self._ping: Optional[_Call] = None
        self._closing = False
        self._close_ok = False
        self._error: Optional[LockingCenterError] = None

    # -- life --------------------------------------------------------------

    async def open(self) -> "AsyncSession":
        """Open the session.

        :raises UnreachableError: no connection, or no answer in time.
        :raises RefusedError: the server refused the session (wrong auth
            token, connection limit, a server without sessions).
        """
        if self._loop is not None:
            raise RuntimeError("session already opened")
        loop = asyncio.get_running_loop()
        reader, writer, answer, sent_at = await self._dial(0, self.connect_timeout)
        self._loop = loop
        self._id, self._ttl = answer.session, answer.ttl_ms / 1000.0
        self._confirmed = self._last_sent = sent_at
        self._done = loop.create_future()
        self._wake = asyncio.Event()
        self._supervisor = loop.create_task(self._run(reader, writer), name="locking-center session %016x" % self._id)
        log.debug("session %016x opened, ttl %gs", self._id, self._ttl)
        return self

    async def __aenter__(self) -> "AsyncSession":
        if self._loop is None:
            await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()
        if exc_type is None and isinstance(self._error, SessionLostError):
            raise self._ended_error()

    async def close(self, timeout: Optional[float] = None) -> None:
        """End the session: the server refuses its pending Locks and releases
        every key it holds at once; then the session's tasks end.

        When the server cannot be told within ``timeout`` seconds (default:
        the TTL plus ``connect_timeout``), everything stops anyway and a
        warning is logged: the server then releases the holds when the TTL
        passes.  Closing an ended session only finishes the cleanup.
        """
        if self._loop is None:
            return
        if self._error is None:
            self._closing = True
            limit = self._ttl + self.connect_timeout if timeout is None else timeout
            try:
                async with asyncio.timeout(limit):
                    while True:
                        try:
                            await self._round_trip(_Call(A.CLOSE), None)
                            break
                        except DisconnectedError:
                            continue  # sent again after the resume; closing twice is harmless
            except (TimeoutError, UnreachableError, ProtocolError) as e:
                log.warning(
                    "session %016x: close not confirmed (%s); the server releases its holds when its TTL (%gs) passes",
                    self._id, e or "timed out", self._ttl,
                )
            except (SessionClosedError, SessionLostError):
                pass
            finally:
                self._finish(SessionClosedError("session %016x closed" % self._id))
        sup = self._supervisor
        if sup is not None and not sup.done() and sup is not asyncio.current_task():
            sup.cancel()
            await asyncio.wait([sup])

    # -- what the program sees ---------------------------------------------

    @property
    def id(self) -> int:
        """The session id the server gave (the JSON API writes it ``"%016x" % id``)."""
        return self._id

    @property
    def ttl(self) -> float:
        """The TTL the server granted, in seconds."""
        return self._ttl

    @property
    def source(self) -> Text:
        return self._source

    @property
    def done(self) -> "asyncio.Future[BaseException]":
        """A future resolved when the session ends; its result is the reason:
        a :class:`SessionLostError` when it was lost (its holds are gone), a
        :class:`SessionClosedError` after :meth:`close`.  It never raises."""
        self._check_opened()
        assert self._done is not None
        return self._done

    @property
    def error(self) -> Optional[LockingCenterError]:
        """``None`` while the session lives, else why it ended (as :attr:`done`)."""
        return self._error

    async def wait_lost(self) -> SessionLostError:
        """Wait until the session is lost and return why; if it is closed
        instead, raise :class:`SessionClosedError`."""
        err = await asyncio.shield(self.done)
        if isinstance(err, SessionLostError):
            return err
        raise self._ended_error()

    def lock(self, key: Text, *, timeout: Optional[float] = None) -> _GrantRequest:
        """Wait for ``key`` in FIFO order and hold it through this session.

        ``await session.lock(k)`` returns an :class:`AsyncGrant` (its
        ``token`` is the fencing token); ``async with session.lock(k) as g:``
        holds the key for the block.  The key waits behind every earlier
        waiter, this session's own Locks and holds of it included (a key the
        session holds is not re-entered).

        :param timeout: seconds to wait at most, then :class:`LockTimeoutError`.
            Cancelling the task gives up too.  Either way Cancel is sent, and
            a grant that crossed it is unlocked again: an error means nothing
            is held.
        :raises ResetWhileWaitingError: the key or this source was reset meanwhile.
        A Lock waiting when the connection drops goes on waiting: it is
        reissued with its id after the resume (a grant made for it before
        the drop is returned at once).
        :raises SessionLostError: the session was lost.
        """
        raw = proto.encode_key(key)

        async def acquire() -> AsyncGrant:
            answer = await self._round_trip(_Call(A.LOCK, raw), timeout, timeout_error=LockTimeoutError)
            if answer.status == proto.OK:
                return AsyncGrant(self, key, raw, answer.token)
            self._refusal(answer.status, ResetWhileWaitingError("lock %r was answered '-': reset while waiting" % (key,)))
            raise AssertionError("unreachable")

        return _GrantRequest(acquire())

    async def try_lock(self, key: Text) -> Optional[AsyncGrant]:
        """Take ``key`` if nobody holds it now (this session included); the
        grant, or ``None`` when someone holds it.

        A try-lock pending when the connection drops is reissued after the
        resume (its grant, if one was made, is returned).

        :raises OutcomeUnknownError: no answer within ``answer_timeout``
            after it was sent; a grant that comes later is given back, so
            nothing is held.
        """
        raw = proto.encode_key(key)
        answer = await self._round_trip(_Call(A.TRY_LOCK, raw), self.answer_timeout, timeout_error=OutcomeUnknownError)
        if answer.status == proto.OK:
            return AsyncGrant(self, key, raw, answer.token)
        if answer.status == proto.NOT_WON:
            return None
        self._refusal(answer.status, RefusedError("try-lock %r was refused" % (key,)))
        raise AssertionError("unreachable")

    def lock_nowait(self, key: Text) -> _GrantRequest:
        """Scoped try-lock: like :meth:`lock` but never waits.

        :raises NotWonError: someone holds the key.
        """
        proto.encode_key(key)

        async def acquire() -> AsyncGrant:
            grant = await self.try_lock(key)
            if grant is None:
                raise NotWonError("key %r is held by someone else" % (key,))
            return grant

        return _GrantRequest(acquire())

    async def unlock(self, key: Text, token: int = 0) -> int:
        """Release this session's grant of ``key`` with ``token`` (0: whichever
        grant the session holds on it); returns the released grant's token.

        Prefer :meth:`AsyncGrant.unlock`, which names its token.

        :raises NotHeldError: the session does not hold that grant; nothing
            was released (never another holder's grant).
        :raises OutcomeUnknownError: the answer was lost; the session settles
            that grant by its token after the resume.
        """
        return await self._unlock(proto.encode_key(key), token, key)

    async def wait(self, key: Text, *, timeout: Optional[float] = None) -> None:
        """Wait for one's turn on ``key``: lock it, then unlock it at once."""
        grant = await self.lock(key, timeout=timeout)
        await grant.unlock()

    async def reset_by_key(self, key: Text) -> None:
        """Drop ``key``'s holder, whoever it is, and refuse its waiters."""
        await self._reset(A.RESET_BY_KEY, proto.encode_key(key), "reset of key %r" % (key,))

    async def reset_by_source(self, source: Optional[Text] = None) -> None:
        """Refuse every waiter of ``source`` and release every key it holds
        (default: this session's source; empty: this connection's IP).  The
        session stays open, though it loses its holds if ``source`` is its own."""
        src = self._source if source is None else source
        await self._reset(A.RESET_BY_SOURCE, proto.encode_source(src), "reset of source %r" % (src,))

    def __repr__(self) -> str:
        state = "open" if self._error is None else type(self._error).__name__
        return "AsyncSession(%s, id=%016x, ttl=%g, %s)" % (_dial.describe(self._targets), self._id, self._ttl, state)

    @property
    def address(self) -> str:
        """The address the session is (or was last) connected to."""
        return self._where

    # -- calls ---------------------------------------------------------------

    async def _unlock(self, raw: bytes, token: int, key: Text) -> int:
        proto._uint(token, 64, "token")
        try:
            answer = await self._round_trip(_Call(A.UNLOCK, raw, token), self.answer_timeout, timeout_error=OutcomeUnknownError)
        except DisconnectedError as e:
            raise OutcomeUnknownError("unlock %r: the connection broke before its answer" % (key,)) from e
        if answer.status == proto.OK:
            return answer.token
        self._refusal(answer.status, NotHeldError("unlock %r: this session does not hold that grant" % (key,)))
        raise AssertionError("unreachable")

    async def _reset(self, action: A, raw: bytes, what: str) -> None:
        try:
            answer = await self._round_trip(_Call(action, raw), self.answer_timeout, timeout_error=OutcomeUnknownError)
        except DisconnectedError as e:
            raise OutcomeUnknownError("%s: the connection broke before its answer" % what) from e
        if answer.status != proto.OK:
            self._refusal(answer.status, RefusedError("%s was refused" % what))

    def _refusal(self, status: int, err: LockingCenterError) -> None:
        """Raise the error of a non-'+' answer."""
        if status == proto.FAIL:
            if self._closing and isinstance(err, ResetWhileWaitingError):
                raise SessionClosedError("lock refused by the close of this session")
            raise err
        raise ProtocolError("unexpected answer byte 0x%02x" % status)

    def _check_opened(self) -> None:
        if self._loop is None:
            raise RuntimeError("the session is not open: await session.open() or use 'async with'")

    def _ended_error(self) -> LockingCenterError:
        """A fresh exception saying why the session ended."""
        err = self._error
        assert err is not None
        return type(err)(str(err))

    async def _round_trip(
        self,
        c: _Call,
        timeout: Optional[float],
        timeout_error: Type[LockingCenterError] = UnreachableError,
    ) -> SessionAnswer:
        """Queue ``c`` and wait for its answer, at most ``timeout`` seconds."""
        self._check_opened()
        if self._error is not None:
            raise self._ended_error()
        assert self._loop is not None and self._wake is not None
        fut: "asyncio.Future[SessionAnswer]" = self._loop.create_future()
        c.future = fut
        self._queue.append(c)
        self._wake.set()
        try:
            async with asyncio.timeout(timeout):
                try:
                    return await fut
                except asyncio.CancelledError:
                    self._give_up(c)
                    raise
        except TimeoutError:
            if timeout_error is LockTimeoutError:
                raise LockTimeoutError("not granted within %gs" % timeout) from None  # type: ignore[str-format]
            if (c.sent or c.reissue) and timeout_error is OutcomeUnknownError:
                raise OutcomeUnknownError("no answer within %gs; the request may have taken effect" % timeout) from None  # type: ignore[str-format]
            raise UnreachableError("no answer within %gs" % timeout) from None  # type: ignore[str-format]

    def _give_up(self, c: _Call) -> None:
        """The caller stopped waiting for ``c``: withdraw it as the protocol says."""
        fut = c.future
        if c.finished:
            # The outcome came first.  A grant nobody will own goes back.
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                answer = fut.result()
                if c.action in (A.LOCK, A.TRY_LOCK) and answer.status == proto.OK:
                    if self._held.get(c.key) == answer.token:
                        self._forget_held(c.key)
                    self._enqueue(self._stray_unlock(_Stray(c.key, answer.token)))
            return
        c.finished = True
        if fut is not None and not fut.done():
            fut.cancel()
        if not c.sent and not c.reissue:
            c.dropped = True  # nothing reached the server
        elif c.action == A.LOCK:
            c.gave_up = True
            if c.sent:
                self._enqueue(_Call(A.CANCEL, token=c.id, internal=lambda r: None))
            # else its reissue goes out first, and its Cancel right after it (_take)
        else:
            c.gave_up = True  # a TryLock's '+' to come is given back on arrival

    def _forget_held(self, key: bytes) -> None:
        """The program no longer holds ``key``: its grant's id is free again."""
        del self._held[key]
        self._reserved.discard(self._held_id.pop(key, -1))

    def _enqueue(self, c: _Call) -> None:
        self._queue.append(c)
        assert self._wake is not None
        self._wake.set()

    def _complete(self, c: _Call, r: _Result) -> None:
        """Hand ``c`` its outcome, once."""
        if c.internal is not None:
            c.internal(r)
            return
        if c.finished:
            return
        c.finished = True
        fut = c.future
        if fut is None or fut.done():
            return
        if isinstance(r, BaseException):
            fut.set_exception(r)
        else:
            fut.set_result(r)

    def _stray_unlock(self, st: _Stray) -> _Call:
        """The session's own Unlock of a grant nobody owns.  If its answer is
        lost too, the stray is kept for the next resume."""

        def settled(r: _Result) -> None:
            if isinstance(r, DisconnectedError):
                self._strays.append(st)
            elif isinstance(r, SessionAnswer) and r.status == proto.OK:
                log.info("session %016x released a stray grant of %r (token %d)", self._id, _text(st.key), r.token)

        return _Call(A.UNLOCK, st.key, st.token, internal=settled)

    # -- connection ------------------------------------------------------------

    async def _dial(self, resume: int, timeout: float, deadline: Optional[float] = None):  # type: ignore[no-untyped-def]
        """Connect to any address and open (``resume`` 0: a new session),
        each address tried in turn within ``timeout`` seconds; the streams,
        the answer and when the open was sent.

        An address that does not connect, or connects and closes without
        an answer (a node that has no leader to forward to, a node that
        dies meanwhile), is passed over for the next; a ``-`` answer is the
        cluster's and ends the attempt.
        """
        errors: List[str] = []
        last: Optional[BaseException] = None
        for ep in await _dial.resolve_async(self._targets, errors):
            t = timeout if deadline is None else min(timeout, deadline - time.monotonic())
            if t <= 0:
                errors.append("the session's TTL ran out")
                break
            try:
                return await self._open_on(ep, resume, t)
            except UnreachableError as e:
                errors.append(str(e))
                last = e.__cause__ or e
        raise _dial.unreachable(self._targets, errors, last)

    async def _open_on(self, ep: _dial.Endpoint, resume: int, timeout: float):  # type: ignore[no-untyped-def]
        """Connect to one endpoint and open there."""
        frame = proto.encode_open(proto.SESSION_VERSION, self._ttl_ms, resume, self._source, self._auth)
        where = ep.where
        writer: Optional[asyncio.StreamWriter] = None
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    ep.sockaddr[0],
                    ep.sockaddr[1],
                    family=ep.family,
                    ssl=self._tls,
                    server_hostname=(self._server_hostname or ep.name) if self._tls is not None else None,
                )
                _keepalive(writer.get_extra_info("socket"))
                sent_at = time.monotonic()
                writer.write(frame)
                await writer.drain()
                data = await reader.readexactly(proto.ANSWER_SIZE)
        except TimeoutError:
            _abort(writer)
            raise UnreachableError("%s: no answer within %gs" % (where, timeout)) from None
        except asyncio.IncompleteReadError as e:
            _abort(writer)
            if e.partial[:1] == bytes((proto.FAIL,)) and len(e.partial) == 1:
                raise RefusedError("%s refused the session (it answered '-' and closed: no session support?)" % where) from None
            raise UnreachableError("%s: the connection closed without an answer" % where) from None
        except OSError as e:  # ssl.SSLError included: a certificate refused
            _abort(writer)
            raise UnreachableError("%s: %s" % (where, e)) from e
        except BaseException:
            _abort(writer)
            raise
        self._where = where
        answer = proto.decode_open_answer(data)
        if answer.status != proto.OK:
            _abort(writer)
            if resume:
                raise SessionLostError("the server refused to resume session %016x (it expired or was ended)" % resume)
            raise RefusedError("%s refused the session (wrong auth token, connection limit, or unknown version)" % where)
        if answer.ttl_ms == 0 or answer.session == 0:
            _abort(writer)
            raise ProtocolError("the server opened a session with ttl %d ms and id %d" % (answer.ttl_ms, answer.session))
        return reader, writer, answer, sent_at

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The supervisor: serve a connection until it breaks, then resume on
        a new one, until the session ends."""
        try:
            while True:
                why = await self._serve(reader, writer)
                if self._error is not None:
                    return
                if self._closing and self._close_ok:
                    self._finish(SessionClosedError("session %016x closed" % self._id))
                    return
                self._disconnected(why)
                log.info("session %016x: connection lost (%s); resuming", self._id, why)
                try:
                    reader, writer = await self._resume()
                except LockingCenterError as e:
                    self._finish(SessionClosedError("session %016x closed" % self._id) if self._closing else e)
                    return
                log.info("session %016x resumed", self._id)
        finally:
            if self._error is None:  # cancelled from outside (the loop is closing)
                self._finish(SessionClosedError("session %016x closed" % self._id))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> BaseException:
        """Run the reader and the writer of one connection until either stops; why."""
        if self._error is not None:
            _abort(writer)
            return self._error
        self._transport = writer.transport
        tasks = {asyncio.ensure_future(self._read(reader)), asyncio.ensure_future(self._write(writer))}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            _abort(writer)
            await asyncio.wait(tasks)
            self._transport = None
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                return t.exception()  # type: ignore[return-value]
        return ConnectionError("the connection ended")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                data = await reader.readexactly(proto.ANSWER_SIZE)
            except asyncio.IncompleteReadError:
                raise ConnectionError("the server closed the connection") from None
            self._deliver(proto.decode_answer(data))

    def _deliver(self, a: SessionAnswer) -> None:
        """Settle the call an answer is for."""
        c = self._pending.pop(a.id, None)
        if c is None:
            log.debug("session %016x: answer for no pending request (id %d)", self._id, a.id)
            return
        if self._queue and len(self._pending) >= _MAX_PENDING - 2:
            self._wake.set()  # type: ignore[union-attr]  # the writer may be holding requests back
        if c.sent_at > self._confirmed:
            self._confirmed = c.sent_at
        if c is self._ping:
            self._ping = None
        if c.action in (A.LOCK, A.TRY_LOCK) and a.status == proto.OK:
            if c.gave_up:
                # The grant crossed the Cancel (or the caller's end): nobody
                # owns it, so it goes back at once, by its token.
                self._enqueue(self._stray_unlock(_Stray(c.key, a.token)))
            else:
                self._held[c.key] = a.token
                self._held_id[c.key] = c.id
                self._reserved.add(c.id)
        self._complete(c, a)
        if c.action == A.CLOSE and a.status == proto.OK:
            self._close_ok = True

    async def _write(self, writer: asyncio.StreamWriter) -> None:
        """Send the queued requests, all that are queued in one write, and the
        Pings, until the connection fails."""
        assert self._wake is not None
        ping_every = self._ttl / 3
        dead_after = self._ttl / 3  # a Ping unanswered this long: the connection is dead
        write_timeout = max(self._ttl / 3, 1.0)
        while True:
            now = time.monotonic()
            ping = self._ping
            if ping is not None and ping.sent and now - ping.sent_at >= dead_after:
                raise ConnectionError("no answer to Ping for %gs" % dead_after)
            if ping is None and (now - self._last_sent >= ping_every or now - self._confirmed >= ping_every):
                ping = self._ping = _Call(A.PING, internal=lambda r: None)
                self._queue.append(ping)
            self._wake.clear()
            buf = self._take(now)
            if buf:
                writer.write(buf)
                try:
                    async with asyncio.timeout(write_timeout):
                        await writer.drain()
                except TimeoutError:
                    raise ConnectionError("a write did not complete within %gs" % write_timeout) from None
                continue  # what was queued during the write goes next
            if ping is not None and ping.sent:
                wait = ping.sent_at + dead_after - now
            elif ping is not None:  # held back by the pending bound: an answer wakes the writer
                wait = ping_every
            else:
                wait = min(self._last_sent, self._confirmed) + ping_every - now
            try:
                async with asyncio.timeout(max(wait, 0.001)):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _take(self, now: float) -> bytes:
        """Move the queued calls the server may receive now into pending and
        return their frames.  A call is held back while the pending bound is
        reached; the last place is kept for a Ping, so that a session whose
        every request waits can still keep itself alive."""
        out = bytearray()
        rest: List[_Call] = []
        for c in self._queue:
            if c.dropped:
                continue
            if c.action != A.CANCEL and len(self._pending) >= (_MAX_PENDING if c.action == A.PING else _MAX_PENDING - 1):
                rest.append(c)
                continue
            c.sent, c.sent_at = True, now
            if c.action == A.CANCEL:
                out += proto.encode_request(A.CANCEL, c.token, 0, b"")
                continue
            if c.reissue:
                self._reserved.discard(c.id)
            if not c.reissue or c.id in self._pending:
                cid = self._next_id
                while cid in self._pending or cid in self._reserved:
                    cid = (cid + 1) & proto.MAX_ID
                self._next_id = (cid + 1) & proto.MAX_ID
                c.id = cid
            self._pending[c.id] = c
            if c.action == A.UNLOCK and c.internal is None:
                tok = self._held.get(c.key)
                if tok is not None and c.token in (0, tok):
                    self._forget_held(c.key)
            out += proto.encode_request(c.action, c.id, c.token, c.key)
            if c.action == A.LOCK and c.gave_up:
                # A reissue whose caller gave up before it went out: withdrawn
                # at once (a grant it finds is given back when its '+' comes).
                out += proto.encode_request(A.CANCEL, c.id, 0, b"")
        if len(rest) < len(self._queue):
            self._last_sent = now
        self._queue = rest
        return bytes(out)

    def _disconnected(self, cause: BaseException) -> None:
        """Settle the calls that waited on the lost connection: its Locks and
        TryLocks are queued to be reissued with their ids, first, in the
        order they were sent; the others fail."""
        why = "the session's connection to %s broke (%s)" % (self._where, cause)
        pending, self._pending = self._pending, {}
        reissue: List[_Call] = []
        for c in pending.values():
            if c.action in (A.LOCK, A.TRY_LOCK):
                if c.internal is None and not c.gave_up:
                    # Sent again with its id after the resume: the server
                    # answers the grant it made for it, if it made one.
                    c.sent, c.reissue = False, True
                    self._reserved.add(c.id)
                    reissue.append(c)
                    continue
                self._strays.append(_Stray(c.key, 0))
                self._complete(c, DisconnectedError(why))
            elif c.action == A.UNLOCK:
                if c.internal is None:
                    self._strays.append(_Stray(c.key, c.token))
                self._complete(c, DisconnectedError(why) if c.internal is not None else OutcomeUnknownError(why))
            elif c.action in (A.RESET_BY_KEY, A.RESET_BY_SOURCE):
                self._complete(c, OutcomeUnknownError(why))
            else:
                self._complete(c, DisconnectedError(why))
        self._ping = None
        # Queued Cancels name Locks of the lost connection (a reissue that
        # was given up sends its own); a queued Ping is of no use to the
        # next one.
        rest = [c for c in self._queue if c.action not in (A.CANCEL, A.PING)]
        reissue.sort(key=lambda c: c.sent_at)
        self._queue = reissue + rest

    async def _resume(self):  # type: ignore[no-untyped-def]
        """Reconnect, in rounds over every address, until a server takes the
        session back, refuses it, or the TTL (counted from the send time of
        the last answered request) has passed."""
        backoff = _MIN_BACKOFF
        while True:
            left = self._confirmed + self._ttl - time.monotonic()
            if left <= 0:
                raise SessionLostError(
                    "session %016x lost: its TTL (%gs) passed without a resume (%s)" % (self._id, self._ttl, _dial.describe(self._targets))
                )
            try:
                reader, writer, _, sent_at = await self._dial(self._id, self.connect_timeout, self._confirmed + self._ttl)
            except SessionLostError:
                raise
            except LockingCenterError as e:
                log.debug("session %016x: resume failed (%s); retrying", self._id, e)
            else:
                self._resumed(sent_at)
                return reader, writer
            left = self._confirmed + self._ttl - time.monotonic()
            await asyncio.sleep(max(min(backoff * random.uniform(0.5, 1.0), left), 0))
            backoff = min(2 * backoff, _MAX_BACKOFF)

    def _resumed(self, sent_at: float) -> None:
        """Restart the TTL and put the unlocks of the strays first in the
        queue, so that they reach the server before any new request (a new
        Lock of the same key must not be released by them)."""
        self._confirmed = self._last_sent = sent_at
        head: List[_Call] = []
        unknown = set()
        for st in self._strays:
            tok = self._held.get(st.key)
            if tok is not None and st.token in (0, tok):
                continue  # the program holds this key through the session: no stray can hold it
            if st.token == 0:
                if st.key in unknown:
                    continue
                unknown.add(st.key)
            head.append(self._stray_unlock(st))
        self._strays = []
        self._queue = head + self._queue

    def _finish(self, err: LockingCenterError) -> None:
        """End the session with ``err`` (once): every call fails, ``done``
        resolves, the connection is dropped."""
        if self._error is not None:
            return
        self._error = err
        if self._transport is not None:
            self._transport.abort()  # a write blocked on a silent peer ends now
        pending, self._pending = self._pending, {}
        for c in pending.values():
            self._complete(c, err)
        queue, self._queue = self._queue, []
        for c in queue:
            if not c.dropped:
                self._complete(c, err)
        self._strays = []
        self._held.clear()
        self._held_id.clear()
        self._reserved.clear()
        if self._done is not None and not self._done.done():
            self._done.set_result(err)
        if self._wake is not None:
            self._wake.set()
        if isinstance(err, SessionLostError):
            log.warning("%s", err)


def _keepalive(sock: Optional[socket.socket]) -> None:
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in _KEEPALIVE:
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    except OSError as e:  # not fatal: the session's Pings notice a dead peer anyway
        log.debug("cannot set TCP keepalive: %s", e)


def _abort(writer: Optional[asyncio.StreamWriter]) -> None:
    if writer is not None:
        writer.transport.abort()
