"""Answer mapping and transport rules, against a scripted in-process server."""

import asyncio
import socket
import threading

import pytest

from locking_center import (
    AsyncClient,
    Client,
    InvalidRequestError,
    LockTimeoutError,
    NotWonError,
    ProtocolError,
    RefusedError,
    ResetWhileWaitingError,
    UnreachableError,
)

from conftest import load_vectors, unused_address

ANSWERS = {a["char"]: bytes.fromhex(a["hex"]) for a in load_vectors()["answers"]}


class FakeServer:
    """Answers each connection with the next scripted byte (None: close unanswered)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.script = []
        self.frames = []
        self.half_closed = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _read_frame(self, conn):
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

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    self.frames.append(self._read_frame(conn))
                except EOFError:
                    continue
                conn.settimeout(0.05)
                try:
                    self.half_closed.append(conn.recv(1) == b"")
                except socket.timeout:
                    self.half_closed.append(False)
                answer = self.script.pop(0) if self.script else None
                if answer is not None:
                    conn.sendall(answer)

    def close(self):
        self.sock.close()


@pytest.fixture
def fake():
    server = FakeServer()
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
