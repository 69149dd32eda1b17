"""Answer mapping and transport rules, against a scripted in-process server."""

import asyncio
import socket
import threading
import time

import pytest

from locking_center import (
    CancelEvent,
    AsyncClient,
    Client,
    InvalidRequestError,
    LockCancelledError,
    LockTimeoutError,
    NotWonError,
    ProtocolError,
    RefusedError,
    ResetWhileWaitingError,
    UnreachableError,
)

from conftest import load_vectors, unused_address

ANSWERS = {a["char"]: bytes.fromhex(a["hex"]) for a in load_vectors()["answers"]}


def read_frame(conn):
    """Read one request frame from ``conn``; EOFError if the client hangs up first."""
    buf = b""

    def need(n):
        nonlocal buf
        while len(buf) < n:
            chunk = conn.recv(256)
            if not chunk:
                raise EOFError
            buf += chunk

    need(2)
    need(2 + buf[1] + 1)
    need(2 + buf[1] + 1 + buf[2 + buf[1]])
    return buf


class LoopbackServer:
    """A scripted stand-in on a loopback port: each accepted connection is
    handed to ``_handle`` in one thread, and closed after it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]

    def start(self):
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._handle(conn)

    def _handle(self, conn):
        raise NotImplementedError

    def close(self):
        self.sock.close()


class FakeServer(LoopbackServer):
    """Answers each connection with the next scripted byte (None: close unanswered)."""

    def __init__(self):
        super().__init__()
        self.script = []
        self.frames = []
        self.half_closed = []

    def _handle(self, conn):
        try:
            self.frames.append(read_frame(conn))
        except EOFError:
            return
        conn.settimeout(0.05)
        try:
            self.half_closed.append(conn.recv(1) == b"")
        except socket.timeout:
            self.half_closed.append(False)
        answer = self.script.pop(0) if self.script else None
        if answer is not None:
            conn.sendall(answer)


@pytest.fixture
def fake():
    server = FakeServer().start()
    yield server
    server.close()


CASES = [
    # (call, answer char, expected result or exception)
    ("lock", "+", "held"),
    ("lock", "-", ResetWhileWaitingError),
    ("lock", "#", ProtocolError),
    ("try_lock", "+", True),
    ("try_lock", "#", False),
    ("try_lock", "-", RefusedError),
    ("lock_nowait", "#", NotWonError),
    ("unlock", "+", None),
    ("unlock", "-", RefusedError),
    ("reset_by_key", "+", None),
    ("reset_by_key", "-", RefusedError),
    ("reset_by_source", "+", None),
    ("reset_by_source", "-", RefusedError),
]


def call(client, name):
    """Make the call; an AsyncClient's coroutine is run to its end."""
    result = getattr(client, name)("svc-a" if name == "reset_by_source" else "abc")
    if isinstance(client, AsyncClient):
        result = asyncio.run(result)
    return "held" if name in ("lock", "lock_nowait") else result


@pytest.mark.parametrize("make", [Client, AsyncClient], ids=["sync", "async"])
@pytest.mark.parametrize("name,char,expected", CASES, ids=lambda v: str(v))
def test_answer_mapping(fake, make, name, char, expected):
    fake.script.append(ANSWERS[char])
    client = make(fake.address, source="svc-a")
    if isinstance(expected, type):
        with pytest.raises(expected):
            call(client, name)
    else:
        assert call(client, name) == expected
    assert fake.half_closed == [False], "client must not half-close before reading the answer"


def test_frames_on_the_wire(fake):
    fake.script += [ANSWERS["+"]] * 4
    client = Client(fake.address, source="svc-a")
    with client.lock("abc"):
        pass
    client.reset_by_source()
    client.reset_by_key("abc")
    assert [f.hex() for f in fake.frames] == [
        "0103616263057376632d61",
        "0203616263057376632d61",
        "0400057376632d61",
        "0303616263057376632d61",
    ]


def test_block_error_wins_over_unlock_error(fake):
    fake.script += [ANSWERS["+"], ANSWERS["-"]] * 2  # granted, then the unlock is refused

    async def async_block():
        async with AsyncClient(fake.address).lock("abc"):
            1 / 0

    with pytest.raises(ZeroDivisionError):
        with Client(fake.address).lock("abc"):
            1 / 0
    with pytest.raises(ZeroDivisionError):
        asyncio.run(async_block())
    assert [f[0] for f in fake.frames] == [1, 2, 1, 2]  # each block still sent its unlock


def test_addresses(monkeypatch):
    assert Client("[::1]:7").address == "[::1]:7"
    assert Client("::1").address == "[::1]:22119"
    assert Client("lc.example").address == "lc.example:22119"
    assert AsyncClient(("10.0.0.1", 7)).address == "10.0.0.1:7"
    monkeypatch.setenv("LC_ADDRESS", "lc.example:9")
    assert Client().address == AsyncClient().address == "lc.example:9"
    monkeypatch.delenv("LC_ADDRESS")
    assert Client().address == "localhost:22119"
    for bad in ("h:notaport", "h:0", "[::1", "[::1]7", ""):
        with pytest.raises(InvalidRequestError):
            Client(bad)


def test_closed_without_answer_is_unreachable(fake):
    with pytest.raises(UnreachableError):
        Client(fake.address).unlock("abc")
    with pytest.raises(UnreachableError):
        asyncio.run(AsyncClient(fake.address).try_lock("abc"))


def test_unreachable():
    addr = unused_address()
    with pytest.raises(UnreachableError):
        Client(addr).try_lock("abc")
    with pytest.raises(UnreachableError):
        asyncio.run(AsyncClient(addr).try_lock("abc"))


def test_validation_before_connecting():
    addr = unused_address()  # nothing listens: a connection attempt would be UnreachableError
    with pytest.raises(InvalidRequestError):
        Client(addr).lock("k" * 128)
    with pytest.raises(InvalidRequestError):
        Client(addr).unlock("")
    with pytest.raises(InvalidRequestError):
        Client(addr, source="s" * 128)
    with pytest.raises(InvalidRequestError):
        Client(addr).reset_by_source("é" * 64)
    with pytest.raises(InvalidRequestError):
        AsyncClient(addr).lock("é" * 64)  # refused at the call, before any await
    with pytest.raises(InvalidRequestError):
        asyncio.run(AsyncClient(addr).try_lock(""))


def test_async_lock_is_a_coroutine(fake):
    fake.script += [ANSWERS["+"]] * 4
    client = AsyncClient(fake.address)

    async def main():
        held = await asyncio.create_task(client.lock("abc"))
        await held.unlock()
        held = await asyncio.wait_for(client.lock("abc"), 5)
        return held

    held = asyncio.run(main())
    assert held.held
    assert asyncio.run(client.lock("abc", timeout=0.5)).held is True


def test_zero_timeout_gives_up_at_once(fake):
    with pytest.raises(LockTimeoutError):
        Client(fake.address).lock("abc", timeout=0)
    with pytest.raises(LockTimeoutError):
        asyncio.run(AsyncClient(fake.address).lock("abc", timeout=0))


def test_connect_timeout_is_unreachable():
    # A listener that never accepts, its backlog filled: new connects hang.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    addr = "127.0.0.1:%d" % srv.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(srv.getsockname())
            except BlockingIOError:
                pass
            fillers.append(s)
        with pytest.raises(UnreachableError, match="timed out"):
            Client(addr, connect_timeout=0.3, io_timeout=2).unlock("abc")
        with pytest.raises(UnreachableError, match="timed out"):
            asyncio.run(AsyncClient(addr, connect_timeout=0.3, io_timeout=2).unlock("abc"))
    finally:
        for s in fillers:
            s.close()
        srv.close()


class HangUpServer(LoopbackServer):
    """A Lock or TryLock given up mid-flight.

    The first connection's frame is read, then the fake waits for the client
    to hang up (EOF) and, with ``grant``, sends '+' 150 ms later, as a grant
    the server sent just before it noticed the hang-up would arrive; without
    ``grant`` it closes unanswered, as the server does.  With ``grant``
    "silent" it neither answers nor closes: the connection stays open until
    ``close()``, as from a server that stopped answering.  Later connections
    (a client giving the key back) are recorded and answered ``later``.
    """

    def __init__(self, grant, later=b"+"):
        super().__init__()
        self.grant = grant
        self.later = later
        self.frame = None
        self.got_frame = threading.Event()
        self.hung_up = threading.Event()
        self.later_frames = []
        self.held = []  # silent connections, closed by close()

    def _handle(self, conn):
        conn.settimeout(10)
        try:
            frame = read_frame(conn)
        except (EOFError, OSError):
            return
        if self.frame is not None:
            self.later_frames.append(frame)
            conn.sendall(self.later)
            return
        self.frame = frame
        self.got_frame.set()
        try:
            if conn.recv(1) != b"":
                return  # bytes after the frame: not a hang-up
        except ConnectionResetError:
            pass  # closed outright: a hang-up too
        except OSError:
            return
        self.hung_up.set()
        if self.grant == "silent":
            self.held.append(conn.dup())  # open past this handler, which closes conn
        elif self.grant:
            time.sleep(0.15)
            try:
                conn.sendall(b"+")
            except OSError:
                pass  # the client closed outright: the grant is lost

    def close(self):
        super().close()
        for conn in self.held:
            conn.close()


def _run_cancelled(fake, make_coro):
    """Start the coroutine as a task, cancel it once the fake has its frame."""

    async def main():
        task = asyncio.create_task(make_coro())
        assert await asyncio.to_thread(fake.got_frame.wait, 5), "no frame reached the fake"
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as info:
            await task
        return info.value

    return asyncio.run(main())


def _raised(expected, fn):
    with pytest.raises(expected) as info:
        fn()
    return info.value


def give_up_sync_timeout(fake):
    return _raised(LockTimeoutError, lambda: Client(fake.address, source="svc-a").lock("abc", timeout=0.3))


def give_up_sync_cancel(fake):
    cancel = CancelEvent()
    threading.Thread(target=lambda: fake.got_frame.wait(5) and cancel.set(), daemon=True).start()
    return _raised(LockCancelledError, lambda: Client(fake.address, source="svc-a").lock("abc", cancel=cancel))


def give_up_sync_try_lock_io_timeout(fake):
    return _raised(UnreachableError, lambda: Client(fake.address, source="svc-a", io_timeout=0.3).try_lock("abc"))


def give_up_async_timeout(fake):
    client = AsyncClient(fake.address, source="svc-a")
    return _raised(LockTimeoutError, lambda: asyncio.run(client.lock("abc", timeout=0.3)))


def give_up_async_wait_for(fake):
    client = AsyncClient(fake.address, source="svc-a")
    return _raised(asyncio.TimeoutError, lambda: asyncio.run(asyncio.wait_for(client.lock("abc"), 0.3)))


def give_up_async_task_cancel(fake):
    return _run_cancelled(fake, lambda: AsyncClient(fake.address, source="svc-a").lock("abc"))


def give_up_async_try_lock_cancel(fake):
    return _run_cancelled(fake, lambda: AsyncClient(fake.address, source="svc-a").try_lock("abc"))


def give_up_async_try_lock_io_timeout(fake):
    client = AsyncClient(fake.address, source="svc-a", io_timeout=0.3)
    return _raised(UnreachableError, lambda: asyncio.run(client.try_lock("abc")))


GIVE_UPS = [
    give_up_sync_timeout,
    give_up_sync_cancel,
    give_up_sync_try_lock_io_timeout,
    give_up_async_timeout,
    give_up_async_wait_for,
    give_up_async_task_cancel,
    give_up_async_try_lock_cancel,
    give_up_async_try_lock_io_timeout,
]
GIVE_UP_IDS = [f.__name__[len("give_up_") :] for f in GIVE_UPS]


@pytest.fixture
def hang_up_server():
    servers = []

    def make(grant, later=b"+"):
        servers.append(HangUpServer(grant, later).start())
        return servers[-1]

    yield make
    for server in servers:
        server.close()


@pytest.mark.parametrize("give_up", GIVE_UPS, ids=GIVE_UP_IDS)
def test_give_up_unlocks_a_grant_that_crossed_the_hang_up(hang_up_server, give_up):
    fake = hang_up_server(grant=True)
    give_up(fake)
    assert fake.hung_up.wait(5), "the fake never saw the client hang up"
    # Given back before the error was raised: an Unlock of the same key and source.
    assert fake.later_frames == [b"\x02" + fake.frame[1:]]


@pytest.mark.parametrize("give_up", GIVE_UPS, ids=GIVE_UP_IDS)
def test_give_up_without_a_grant_sends_no_unlock(hang_up_server, give_up):
    fake = hang_up_server(grant=False)
    started = time.monotonic()
    give_up(fake)
    assert fake.hung_up.wait(5), "the fake never saw the client hang up"
    assert fake.later_frames == []
    # The fake closed on the hang-up: the client need not sit out its 2 s grace.
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("give_up", GIVE_UPS, ids=GIVE_UP_IDS)
def test_give_up_error_wins_over_the_unlock_error(hang_up_server, give_up):
    fake = hang_up_server(grant=True, later=b"-")  # the give-back unlock is refused
    err = give_up(fake)  # still the give-up's own error...
    assert fake.later_frames == [b"\x02" + fake.frame[1:]]
    causes = []
    while err.__cause__ is not None:  # wait_for's TimeoutError is caused by the CancelledError
        err = err.__cause__
        causes.append(err)
    assert any(isinstance(c, RefusedError) for c in causes), causes  # ...with the unlock's chained


def lock_sync(fake, timeout):
    Client(fake.address, source="svc-a").lock("abc", timeout=timeout)


def lock_async(fake, timeout):
    asyncio.run(AsyncClient(fake.address, source="svc-a").lock("abc", timeout=timeout))


@pytest.mark.parametrize("lock", [lock_sync, lock_async], ids=["sync", "async"])
def test_give_up_reads_on_for_at_most_the_grace(hang_up_server, lock):
    """The README's "reads on for at most 2 s", against a fake that neither
    answers nor closes after the hang-up."""
    fake = hang_up_server(grant="silent")
    timeout, grace = 0.2, 2.0  # grace: _HANG_UP_GRACE, as the README promises
    outcome = []

    def run():
        try:
            lock(fake, timeout)
        except BaseException as e:
            outcome.append((e, time.monotonic()))
        else:
            outcome.append((None, time.monotonic()))

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(3.5)  # a client still reading is freed when the fake closes
    assert outcome, "still waiting after %.2fs" % (time.monotonic() - started)
    err, ended = outcome[0]
    assert isinstance(err, LockTimeoutError), repr(err)
    elapsed = ended - started
    assert elapsed >= timeout + grace - 0.05, "raised after %.2fs, before the grace ran out" % elapsed
    assert fake.hung_up.is_set()
    assert fake.later_frames == []  # no '+' came back: nothing to unlock
