"""Session rules that a real server cannot be made to show on demand, against
a scripted asyncio server: the reissue of a Lock lost with its connection,
the stray cleanup after a resume, Cancel on a give-up, and the give-back of
a grant that crossed the Cancel."""

import asyncio

import pytest

from locking_center import AsyncSession, LockTimeoutError, OutcomeUnknownError
from locking_center import _protocol as proto

SESSION_ID = 0x0123456789ABCDEF


class Fake:
    """Accepts sessions; hands each connection's requests to a queue."""

    def __init__(self):
        self.conns = asyncio.Queue()

    async def start(self):
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.address = "127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader, writer):
        head = await reader.readexactly(16)  # open with empty source and auth
        await self.conns.put((int.from_bytes(head[6:14], "big"), reader, writer))
        await asyncio.Event().wait()  # the test drives the connection

    @staticmethod
    def answer_open(writer, ttl_ms=10000):
        writer.write(b"+" + ttl_ms.to_bytes(4, "big") + SESSION_ID.to_bytes(8, "big"))

    @staticmethod
    async def request(reader):
        head = await reader.readexactly(14)
        key = await reader.readexactly(head[13])
        return head[0], int.from_bytes(head[1:5], "big"), int.from_bytes(head[5:13], "big"), key

    async def close(self):
        self.server.close()


def run(coro):
    async def bounded():
        async with asyncio.timeout(20):
            return await coro

    return asyncio.run(bounded())


def test_a_lock_lost_with_the_connection_is_reissued_with_its_id_first():
    async def main():
        fake = await Fake().start()
        s = AsyncSession(fake.address)
        opening = asyncio.create_task(s.open())
        resume, reader, writer = await fake.conns.get()
        assert resume == 0
        fake.answer_open(writer)
        await opening
        lock = asyncio.create_task(s.lock("abc"))
        action, lock_id, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.LOCK
        writer.transport.abort()  # as if its '+' were lost with the connection
        later = asyncio.create_task(s.lock("abc"))  # a new Lock of the same key, made meanwhile
        resume, reader, writer = await fake.conns.get()
        assert resume == SESSION_ID
        fake.answer_open(writer)
        action, cid, token, key = await fake.request(reader)
        assert (action, cid, token, key) == (proto.SessionAction.LOCK, lock_id, 0, b"abc")  # the reissue, first
        writer.write(cid.to_bytes(4, "big") + b"+" + (7).to_bytes(8, "big"))  # the grant it had made
        assert (await lock).token == 7
        action, cid, token, key = await fake.request(reader)
        assert (action, key) == (proto.SessionAction.LOCK, b"abc") and cid != lock_id  # then the new Lock
        writer.write(cid.to_bytes(4, "big") + b"+" + (8).to_bytes(8, "big"))
        assert (await later).token == 8
        closing = asyncio.create_task(s.close())
        action, cid, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.CLOSE
        assert cid not in (lock_id,)  # the id of a held grant is not reused
        writer.write(cid.to_bytes(4, "big") + b"+" + bytes(8))
        writer.close()
        await closing
        await fake.close()

    run(main())


def test_a_lock_given_up_then_lost_with_the_connection_is_unlocked_first_after_the_resume():
    async def main():
        fake = await Fake().start()
        s = AsyncSession(fake.address)
        opening = asyncio.create_task(s.open())
        _, reader, writer = await fake.conns.get()
        fake.answer_open(writer)
        await opening
        lock = asyncio.create_task(s.lock("abc", timeout=0.1))
        action, lock_id, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.LOCK
        with pytest.raises(LockTimeoutError):
            await lock
        assert (await fake.request(reader))[:2] == (proto.SessionAction.CANCEL, lock_id)
        writer.transport.abort()  # the Cancel's outcome, and the Lock's, are lost
        resume, reader, writer = await fake.conns.get()
        assert resume == SESSION_ID
        fake.answer_open(writer)
        action, cid, token, key = await fake.request(reader)
        assert (action, token, key) == (proto.SessionAction.UNLOCK, 0, b"abc")  # the cleanup, first
        writer.write(cid.to_bytes(4, "big") + b"-" + bytes(8))  # no stray was held
        closing = asyncio.create_task(s.close())
        action, cid, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.CLOSE
        writer.write(cid.to_bytes(4, "big") + b"+" + bytes(8))
        writer.close()
        await closing
        await fake.close()

    run(main())


def test_a_grant_that_crossed_the_cancel_is_unlocked_by_its_token():
    async def main():
        fake = await Fake().start()
        s = AsyncSession(fake.address)
        opening = asyncio.create_task(s.open())
        _, reader, writer = await fake.conns.get()
        fake.answer_open(writer)
        await opening
        lock = asyncio.create_task(s.lock("abc", timeout=0.1))
        action, lock_id, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.LOCK
        with pytest.raises(LockTimeoutError):
            await lock
        action, cid, token, key = await fake.request(reader)
        assert (action, cid, token, key) == (proto.SessionAction.CANCEL, lock_id, 0, b"")
        writer.write(lock_id.to_bytes(4, "big") + b"+" + (42).to_bytes(8, "big"))  # granted anyway
        action, cid, token, key = await fake.request(reader)
        assert (action, token, key) == (proto.SessionAction.UNLOCK, 42, b"abc")  # given back by its token
        writer.write(cid.to_bytes(4, "big") + b"+" + (42).to_bytes(8, "big"))
        closing = asyncio.create_task(s.close())
        action, cid, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.CLOSE
        writer.write(cid.to_bytes(4, "big") + b"+" + bytes(8))
        writer.close()
        await closing
        await fake.close()

    run(main())


def test_an_unlock_lost_with_the_connection_is_not_known_and_a_try_lock_is_reissued():
    async def main():
        fake = await Fake().start()
        s = AsyncSession(fake.address)
        opening = asyncio.create_task(s.open())
        _, reader, writer = await fake.conns.get()
        fake.answer_open(writer)
        await opening
        lock = asyncio.create_task(s.lock("abc"))
        _, cid, _, _ = await fake.request(reader)
        writer.write(cid.to_bytes(4, "big") + b"+" + (5).to_bytes(8, "big"))
        grant = await lock
        unlock = asyncio.create_task(grant.unlock())
        assert (await fake.request(reader))[0::2] == (proto.SessionAction.UNLOCK, 5)
        try_lock = asyncio.create_task(s.try_lock("xyz"))
        action, try_id, _, key = await fake.request(reader)
        assert (action, key) == (proto.SessionAction.TRY_LOCK, b"xyz")
        writer.transport.abort()  # both answers lost
        with pytest.raises(OutcomeUnknownError):
            await unlock  # never sent again as such
        _, reader, writer = await fake.conns.get()
        fake.answer_open(writer)
        action, cid, token, key = await fake.request(reader)
        # The grant is settled by an Unlock naming its token: it can release that grant only.
        assert (action, token, key) == (proto.SessionAction.UNLOCK, 5, b"abc")
        writer.write(cid.to_bytes(4, "big") + b"-" + bytes(8))  # it had been released
        action, cid, token, key = await fake.request(reader)
        assert (action, cid, key) == (proto.SessionAction.TRY_LOCK, try_id, b"xyz")  # reissued with its id
        writer.write(cid.to_bytes(4, "big") + b"#" + bytes(8))
        assert await try_lock is None
        closing = asyncio.create_task(s.close())
        action, cid, _, _ = await fake.request(reader)
        assert action == proto.SessionAction.CLOSE
        writer.write(cid.to_bytes(4, "big") + b"+" + bytes(8))
        writer.close()
        await closing
        await fake.close()

    run(main())
