"""Sessions against a real server: $LC_TEST_ADDRESS, and servers of the
test's own from $LC_SERVER_BIN (restarts, short TTLs, AUTH_TOKEN)."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import HERE, key_info, load_vectors, wait_for_queue, web_json

from locking_center import (
    AsyncSession,
    CancelEvent,
    LockCancelledError,
    LockTimeoutError,
    NotHeldError,
    NotWonError,
    RefusedError,
    ResetWhileWaitingError,
    Session,
    SessionClosedError,
    SessionLostError,
    UnreachableError,
)


def run(coro, timeout=30):
    """Run one test coroutine, bounded so a hang fails instead of stalling the suite."""

    async def bounded():
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def until(predicate, deadline=5.0, what="condition"):
    """Await a condition (checked every 10 ms) that has no event to wait on."""
    end = time.monotonic() + deadline
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("%s not met within %gs" % (what, deadline))
        await asyncio.sleep(0.01)


def hex_id(session):
    return "%016x" % session.id


def connected(web_address, session):
    """Whether the server's JSON API shows the session connected."""
    for entry in web_json(web_address, "/api/v1/sessions") or []:
        if entry["session"] == hex_id(session):
            return entry["connected"]
    return False


# -- the basics ----------------------------------------------------------------


def test_lock_returns_the_token_the_server_shows(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address, source="py-session") as s:
            assert s.id != 0 and s.ttl > 0
            async with s.lock(key) as grant:
                info = key_info(web_address, key)
                assert info["token"] == grant.token > 0
                assert info["session"] == hex_id(s)
                assert info["source"] == "py-session"
            assert key_info(web_address, key) is None  # the block released it

    run(main())


def test_fifo_across_two_sessions_and_tokens_grow(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address, source="py-a") as a, AsyncSession(server_address, source="py-b") as b:
            first = await a.lock(key)
            b_waits = asyncio.create_task(b.lock(key))
            await asyncio.to_thread(wait_for_queue, web_address, key, 1)
            a_waits = asyncio.create_task(a.lock(key))  # a's second Lock queues behind b
            info = await asyncio.to_thread(wait_for_queue, web_address, key, 2)
            assert [w["source"] for w in info["queue"]] == ["py-b", "py-a"]
            await first.unlock()
            second = await b_waits
            assert not a_waits.done()
            await second.unlock()
            third = await a_waits
            await third.unlock()
            assert first.token < second.token < third.token

    run(main())


def test_cancel_withdraws_the_waiter(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address, source="py-a") as a, AsyncSession(server_address, source="py-b") as b:
            held = await a.lock(key)
            waiter = asyncio.create_task(b.lock(key))
            await asyncio.to_thread(wait_for_queue, web_address, key, 1)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await asyncio.to_thread(wait_for_queue, web_address, key, 0)  # Cancel withdrew it
            with pytest.raises(LockTimeoutError):
                await b.lock(key, timeout=0.2)
            await asyncio.to_thread(wait_for_queue, web_address, key, 0)
            await held.unlock()
            # b holds nothing: the key is free for a try-lock of a.
            grant = await a.try_lock(key)
            assert grant is not None
            await grant.unlock()

    run(main())


def test_sync_cancel_event_gives_up_at_once(server_address, web_address, key):
    with Session(server_address, source="py-a") as a, Session(server_address, source="py-b") as b:
        held = a.lock(key)
        cancel = CancelEvent()
        outcome = []

        def wait():
            try:
                b.lock(key, cancel=cancel)
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                outcome.append(e)

        t = threading.Thread(target=wait)
        t.start()
        wait_for_queue(web_address, key, 1)
        started = time.monotonic()
        cancel.set()
        t.join(5)
        assert time.monotonic() - started < 1.0
        assert isinstance(outcome[0], LockCancelledError), outcome
        wait_for_queue(web_address, key, 0)
        held.unlock()
        with pytest.raises(TypeError):
            b.lock(key, cancel=threading.Event())  # a plain Event cannot wake the call


def test_try_lock_and_lock_nowait(server_address, key):
    async def main():
        async with AsyncSession(server_address) as a, AsyncSession(server_address) as b:
            grant = await a.try_lock(key)
            assert grant is not None and grant.token > 0
            assert await b.try_lock(key) is None
            assert await a.try_lock(key) is None  # the session itself holds it
            with pytest.raises(NotWonError):
                async with b.lock_nowait(key):
                    pass
            await grant.unlock()
            async with b.lock_nowait(key) as g:
                assert g.held

    run(main())


def test_unlock_only_releases_own_grant(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address) as a, AsyncSession(server_address) as b:
            grant = await a.lock(key)
            with pytest.raises(NotHeldError):
                await b.unlock(key)  # b does not hold it
            with pytest.raises(NotHeldError):
                await a.unlock(key, grant.token - 1)  # not this grant
            assert key_info(web_address, key)["token"] == grant.token
            assert await a.unlock(key, grant.token) == grant.token
            with pytest.raises(NotHeldError):
                await a.unlock(key, grant.token)  # already released
            await grant.unlock()  # the Grant knows it was released? No: it asks, and is refused

    with pytest.raises(NotHeldError):
        run(main())


def test_reset_while_waiting(server_address, key):
    async def main():
        async with AsyncSession(server_address) as a, AsyncSession(server_address) as b:
            await a.lock(key)
            waiter = asyncio.create_task(b.lock(key))
            await until(lambda: (key_info_queue(key)) == 1, what="b queued")
            await a.reset_by_key(key)
            with pytest.raises(ResetWhileWaitingError):
                await waiter

    def key_info_queue(k):
        info = key_info(os.environ["LC_TEST_WEB_ADDRESS"], k)
        return len((info or {}).get("queue") or [])

    run(main())


def test_many_concurrent_locks_on_one_session(server_address, key):
    async def main():
        async with AsyncSession(server_address) as s:
            keys = ["%s/%d" % (key, i) for i in range(200)]
            grants = await asyncio.gather(*(s.lock(k) for k in keys))
            tokens = [g.token for g in grants]
            assert len(set(tokens)) == len(tokens)
            await asyncio.gather(*(g.unlock() for g in grants))
            # One key, many tasks: they take it in turn, never two at once.
            inside = 0
            turns = 0

            async def worker():
                nonlocal inside, turns
                async with s.lock(key):
                    inside += 1
                    assert inside == 1
                    await asyncio.sleep(0)
                    inside -= 1
                    turns += 1

            await asyncio.gather(*(worker() for _ in range(20)))
            assert turns == 20

    run(main())


def test_threads_share_one_sync_session(server_address, key):
    with Session(server_address) as s:
        tokens = []
        guard = threading.Lock()
        inside = []

        def worker():
            for _ in range(5):
                with s.lock(key, timeout=10) as g:
                    with guard:
                        inside.append(1)
                        assert len(inside) == 1
                        tokens.append(g.token)
                        inside.pop()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(tokens) == 40
        assert tokens == sorted(tokens) and len(set(tokens)) == 40  # each grant later than the last


def test_close_releases_holds_and_refuses_waiters(server_address, web_address, key):
    async def main():
        a = await AsyncSession(server_address).open()
        b = await AsyncSession(server_address).open()
        await b.lock(key)
        waiter = asyncio.create_task(a.lock(key + "x"))  # free: granted
        other = await waiter
        pending = asyncio.create_task(a.lock(key))
        await until(lambda: len((key_info(web_address, key) or {}).get("queue") or []) == 1, what="a queued")
        await a.close()
        with pytest.raises(SessionClosedError):
            await pending
        assert other.held is False
        assert key_info(web_address, key + "x") is None  # released by the close
        assert isinstance(a.done.result(), SessionClosedError)
        with pytest.raises(SessionClosedError):
            await a.lock(key)
        await b.close()
        assert key_info(web_address, key) is None

    run(main())


def test_session_ended_from_the_web_is_lost(server_address, web_address, key):
    async def main():
        s = await AsyncSession(server_address).open()
        with pytest.raises(SessionLostError):
            async with s.lock(key):
                web_json(web_address, "/api/v1/sessions/%s/end" % hex_id(s), method="POST")
                await asyncio.sleep(30)  # cancelled by the loss
        assert isinstance(s.done.result(), SessionLostError)
        with pytest.raises(SessionLostError):
            await s.lock(key)
        await s.close()  # after a loss: only the cleanup

    run(main())


def test_sync_scoped_form_reports_a_loss(server_address, web_address, key):
    s = Session(server_address)
    try:
        with pytest.raises(SessionLostError):
            with s.lock(key):
                web_json(web_address, "/api/v1/sessions/%s/end" % hex_id(s), method="POST")
                assert isinstance(s.done.result(timeout=5), SessionLostError)
    finally:
        s.close()


def test_ping_keeps_an_idle_session(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address, ttl=1) as s:
            assert s.ttl == 1.0
            async with s.lock(key) as g:
                await asyncio.sleep(2.5)  # 2.5 TTLs with nothing to say but Ping
                assert s.error is None
                assert key_info(web_address, key)["token"] == g.token

    run(main())


def test_resume_after_a_dropped_connection(server_address, web_address, key):
    async def main():
        async with AsyncSession(server_address, ttl=5) as a, AsyncSession(server_address) as b:
            held = await a.lock(key)
            await b.lock(key + "-b")
            blocked = asyncio.create_task(a.lock(key + "-b"))
            await asyncio.to_thread(wait_for_queue, web_address, key + "-b", 1)
            a._transport.abort()  # the connection drops under the session
            await until(lambda: connected(web_address, a), what="resume")
            # The Lock pending on the lost connection was reissued: it waits again.
            await asyncio.to_thread(wait_for_queue, web_address, key + "-b", 1)
            assert not blocked.done()
            # The hold survived, under the same token.
            assert key_info(web_address, key)["token"] == held.token
            assert key_info(web_address, key)["session"] == hex_id(a)
            await held.unlock()
            assert key_info(web_address, key) is None
            await b.unlock(key + "-b")
            g = await blocked
            assert key_info(web_address, key + "-b")["token"] == g.token
            await g.unlock()

    run(main())


def test_original_frames_are_answered(server_address):
    """The original server's frames of the shared vectors, sent byte for byte."""
    host, port = server_address.rsplit(":", 1)
    for vec in load_vectors()["original_frames"]:
        with socket.create_connection((host, int(port)), timeout=5) as c:
            c.sendall(bytes.fromhex(vec["hex"]))
            answer = c.recv(1)
        assert answer in (b"+", b"-"), vec["name"]


# -- servers of the test's own -------------------------------------------------


def test_resume_after_restart_with_data_path(own_server, tmp_path, key):
    srv = own_server(DATA_PATH=tmp_path / "lc.wal").start()

    async def main():
        async with AsyncSession(srv.address, ttl=10) as s:
            grant = await s.lock(key)
            srv.stop()
            srv.start()  # same ports, same log
            # The session resumes by itself, and its hold is still its own.
            await until(lambda: (key_info(srv.web_address, key) or {}).get("session") == hex_id(s), 5, "hold restored")
            await until(lambda: connected(srv.web_address, s), 5, "resume")
            assert key_info(srv.web_address, key)["token"] == grant.token
            assert s.error is None
            later = await s.lock(key + "2")
            assert later.token > grant.token  # tokens grow across the restart
            await grant.unlock()
            assert key_info(srv.web_address, key) is None

    run(main())


def test_session_lost_past_its_ttl_is_reported(own_server, key):
    srv = own_server().start()

    async def main():
        s = await AsyncSession(srv.address, ttl=1).open()
        grant = await s.lock(key)
        started = time.monotonic()
        srv.stop()  # nothing to resume on, and no log: the session will not come back
        with pytest.raises(SessionLostError):
            async with grant:
                await asyncio.sleep(30)
        took = time.monotonic() - started
        assert took < 1.0 + 0.5, took  # reported by the client's own clock, within the TTL
        err = await s.wait_lost()
        assert "TTL" in str(err)
        print("session lost reported %.3fs after the server stopped (TTL 1 s)" % took)
        await s.close()

    run(main())


def test_resume_refused_after_restart_without_log(own_server, key):
    srv = own_server().start()

    async def main():
        s = await AsyncSession(srv.address, ttl=10).open()
        await s.lock(key)
        srv.stop()
        srv.start()  # in memory only: the session is gone
        err = await asyncio.wait_for(s.wait_lost(), 5)
        assert "refused" in str(err)
        await s.close()

    run(main())


def test_auth_token(own_server):
    srv = own_server(AUTH_TOKEN="s3cret-token").start()

    async def main():
        with pytest.raises(RefusedError):
            await AsyncSession(srv.address).open()
        with pytest.raises(RefusedError):
            await AsyncSession(srv.address, auth_token="wrong").open()
        async with AsyncSession(srv.address, auth_token="s3cret-token") as s:
            async with s.lock("py-auth") as g:
                assert g.token > 0

    run(main())


def test_unreachable():
    with pytest.raises(UnreachableError):
        run(AsyncSession("127.0.0.1:1", connect_timeout=1).open())
    with pytest.raises(UnreachableError):
        Session("127.0.0.1:1", connect_timeout=1)


HOLDER = r"""
import sys, time
from locking_center import Session
s = Session(sys.argv[1], ttl=1, source="py-doomed")
grants = [s.lock("%s/%d" % (sys.argv[2], i)) for i in range(int(sys.argv[3]))]
print("held", flush=True)
time.sleep(600)
"""


def test_sigkilled_holder_keys_pass_on_within_ttl(server_address, key):
    """A holder killed with SIGKILL: its keys pass to the next waiter within TTL + 1 s."""
    n = 20
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    child = subprocess.Popen([sys.executable, "-c", HOLDER, server_address, key, str(n)], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline().strip() == b"held"

        async def main():
            async with AsyncSession(server_address) as s:
                waiters = [asyncio.create_task(s.lock("%s/%d" % (key, i))) for i in range(n)]
                await until(lambda: all((key_info(os.environ["LC_TEST_WEB_ADDRESS"], "%s/%d" % (key, i)) or {}).get("waiters") == 1 for i in range(n)), what="waiters queued")
                child.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                grants = await asyncio.gather(*waiters)
                took = time.monotonic() - killed
                assert took <= 1.0 + 1.0, "keys passed on after %.2fs" % took
                for g in grants:
                    await g.unlock()
                return took

        took = run(main())
        print("SIGKILL: %d keys passed on %.3fs after the kill (TTL 1 s)" % (n, took))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
