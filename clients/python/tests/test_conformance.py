"""Conformance against a real server at $LC_TEST_ADDRESS (skipped when unset)."""

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import key_info, unused_address, wait_for_queue

from locking_center import (
    CancelEvent,
    AsyncClient,
    Client,
    InvalidRequestError,
    LockCancelledError,
    LockTimeoutError,
    NotWonError,
    RefusedError,
    ResetWhileWaitingError,
)


def assert_free(client, key):
    """The key is free: a try-lock wins it; it is released again."""
    assert client.try_lock(key) is True
    client.unlock(key)


@pytest.fixture
def client(server_address):
    return Client(server_address, source="py-conformance")


@pytest.fixture
def pool(server_address, key):
    """Threads for waiters; at teardown the key is reset so no waiter is left behind."""
    ex = ThreadPoolExecutor(max_workers=4)
    yield ex
    Client(server_address).reset_by_key(key)
    ex.shutdown(wait=True)


def test_lock_unlock(client, key):
    held = client.lock(key)
    assert held.held
    held.unlock()
    assert not held.held
    with pytest.raises(RefusedError):
        client.unlock(key)  # no longer held


def test_scoped_lock_releases(client, key):
    with client.lock(key, timeout=5):
        assert client.try_lock(key) is False
    assert_free(client, key)


def test_scoped_lock_releases_on_error(client, key):
    with pytest.raises(ZeroDivisionError):
        with client.lock(key):
            1 / 0
    assert_free(client, key)


def test_try_lock_on_held_key(client, server_address, key):
    other = Client(server_address, source="py-other")
    assert client.try_lock(key) is True
    assert other.try_lock(key) is False
    with pytest.raises(NotWonError):
        other.lock_nowait(key)
    client.unlock(key)
    with other.lock_nowait(key):
        assert client.try_lock(key) is False
    assert_free(client, key)


def test_fifo_order(client, server_address, web_address, key, pool):
    order = []

    def waiter(name):
        c = Client(server_address, source="py-" + name)
        with c.lock(key, timeout=10):
            order.append(name)
            time.sleep(0.05)

    client.lock(key)
    first = pool.submit(waiter, "b")
    wait_for_queue(web_address, key, 1)
    second = pool.submit(waiter, "c")
    info = wait_for_queue(web_address, key, 2)
    assert [w["source"] for w in info["queue"]] == ["py-b", "py-c"]
    client.unlock(key)
    first.result(10)
    second.result(10)
    assert order == ["b", "c"]


def test_timeout_withdraws_waiter(client, server_address, web_address, key):
    waiter = Client(server_address, source="py-waiter")
    client.lock(key)
    started = time.monotonic()
    with pytest.raises(LockTimeoutError):
        waiter.lock(key, timeout=0.3)
    assert 0.25 < time.monotonic() - started < 3
    wait_for_queue(web_address, key, 0)
    client.unlock(key)
    # The withdrawn waiter was not handed the key: it is free.
    assert_free(client, key)


def test_cancel_event_withdraws_waiter(client, server_address, web_address, key, pool):
    waiter = Client(server_address, source="py-waiter")
    cancel = CancelEvent()
    client.lock(key)
    fut = pool.submit(waiter.lock, key, cancel=cancel, timeout=10)
    wait_for_queue(web_address, key, 1)
    cancel.set()
    with pytest.raises(LockCancelledError):
        fut.result(5)
    wait_for_queue(web_address, key, 0)
    client.unlock(key)
    assert_free(client, key)


def test_reset_by_key_while_waiting(client, server_address, web_address, key, pool):
    waiter = Client(server_address, source="py-waiter")
    client.lock(key)
    fut = pool.submit(waiter.lock, key, timeout=10)
    wait_for_queue(web_address, key, 1)
    client.reset_by_key(key)
    with pytest.raises(ResetWhileWaitingError):
        fut.result(5)
    assert_free(client, key)  # the holder was dropped too


def test_reset_by_source_while_waiting(client, server_address, web_address, key, pool):
    source = "py-src-" + uuid.uuid4().hex[:8]
    waiter = Client(server_address, source=source)
    client.lock(key)
    fut = pool.submit(waiter.lock, key, timeout=10)
    wait_for_queue(web_address, key, 1)
    client.reset_by_source(source)
    with pytest.raises(ResetWhileWaitingError):
        fut.result(5)
    client.unlock(key)


def test_reset_by_source_releases_held_keys(server_address, key):
    source = "py-src-" + uuid.uuid4().hex[:8]
    owner = Client(server_address, source=source)
    owner.lock(key + "-1")
    owner.lock(key + "-2")
    owner.reset_by_source()  # its own source
    other = Client(server_address, source="py-other")
    for k in (key + "-1", key + "-2"):
        assert_free(other, k)


def test_wait_returns_when_released(client, server_address, web_address, key, pool):
    waiter = Client(server_address, source="py-waiter")
    client.lock(key)
    fut = pool.submit(waiter.wait, key, timeout=10)
    wait_for_queue(web_address, key, 1)
    assert not fut.done()
    client.unlock(key)
    fut.result(5)
    assert_free(client, key)  # wait() released it again


def test_utf8_key_and_empty_source(server_address, web_address, key):
    anonymous = Client(server_address)
    k = "ключ/日本-" + key
    with anonymous.lock(k):
        info = key_info(web_address, k)
        assert info is not None and info["key"] == k
        assert info["source"] == "127.0.0.1"  # empty source: the server uses the peer IP


def test_overlong_key_refused_before_connecting():
    client = Client(unused_address())
    with pytest.raises(InvalidRequestError):
        client.lock("k" * 128)
    with pytest.raises(InvalidRequestError):
        client.try_lock("é" * 64)


# -- asyncio ----------------------------------------------------------------


def test_async_scoped_lock(server_address, key):
    async def main():
        client = AsyncClient(server_address, source="py-async")
        async with client.lock(key, timeout=5) as held:
            assert held.held
            assert await client.try_lock(key) is False
            with pytest.raises(NotWonError):
                async with client.lock_nowait(key):
                    pass
        assert await client.try_lock(key) is True
        await client.unlock(key)

    asyncio.run(main())


def test_async_fifo_and_wait(server_address, web_address, key):
    async def main():
        holder = AsyncClient(server_address, source="py-async-a")
        order = []

        async def waiter(name):
            c = AsyncClient(server_address, source="py-async-" + name)
            async with c.lock(key, timeout=10):
                order.append(name)
                await asyncio.sleep(0.05)

        held = await holder.lock(key)
        b = asyncio.create_task(waiter("b"))
        await asyncio.to_thread(wait_for_queue, web_address, key, 1)
        c = asyncio.create_task(waiter("c"))
        await asyncio.to_thread(wait_for_queue, web_address, key, 2)
        await held.unlock()
        await asyncio.wait_for(asyncio.gather(b, c), 10)
        assert order == ["b", "c"]
        await holder.wait(key, timeout=5)

    asyncio.run(main())


def test_async_cancel_withdraws_waiter(server_address, web_address, key):
    async def main():
        holder = AsyncClient(server_address, source="py-async-a")
        waiter = AsyncClient(server_address, source="py-async-b")
        await holder.lock(key)
        task = asyncio.create_task(waiter.lock(key))
        await asyncio.to_thread(wait_for_queue, web_address, key, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(wait_for_queue, web_address, key, 0)
        with pytest.raises(LockTimeoutError):
            await waiter.lock(key, timeout=0.2)
        await asyncio.to_thread(wait_for_queue, web_address, key, 0)
        await holder.unlock(key)
        assert await holder.try_lock(key) is True
        await holder.unlock(key)

    asyncio.run(main())


def test_async_reset_while_waiting(server_address, web_address, key):
    async def main():
        holder = AsyncClient(server_address, source="py-async-a")
        waiter = AsyncClient(server_address, source="py-async-b")
        await holder.lock(key)
        task = asyncio.create_task(waiter.lock(key, timeout=10))
        await asyncio.to_thread(wait_for_queue, web_address, key, 1)
        await holder.reset_by_key(key)
        with pytest.raises(ResetWhileWaitingError):
            await task

    asyncio.run(main())


def test_one_client_shared_by_threads(client, key):
    """The README: a client holds no connection between calls and can be shared by threads.

    Eight threads take the same key through one Client; inside the lock each
    reads, pauses and writes back a counter, so an overlap would lose an
    increment, and two threads inside at once are seen directly.
    """
    threads, rounds = 8, 25
    state = {"count": 0, "inside": 0, "overlaps": 0}

    def work():
        for _ in range(rounds):
            with client.lock(key, timeout=30):
                state["inside"] += 1
                if state["inside"] > 1:
                    state["overlaps"] += 1
                seen = state["count"]
                time.sleep(0.001)
                state["count"] = seen + 1
                state["inside"] -= 1

    with ThreadPoolExecutor(max_workers=threads) as ex:
        for f in [ex.submit(work) for _ in range(threads)]:
            f.result()
    assert state["overlaps"] == 0
    assert state["count"] == threads * rounds
    assert_free(client, key)
