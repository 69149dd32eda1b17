"""Against a real 3-node cluster (clients/run-tests' fixture: $LC_TEST_CLUSTER,
$LC_TEST_CLUSTER_CONTROL, $LC_TEST_LOST_ANSWER_PREFIX): several addresses, a
follower's address alone, a session riding through a kill -9 of the leader,
and the Reissue of a Lock whose answer was lost."""

import asyncio
import json
import os
import socket
import time
import urllib.parse
import urllib.request

import pytest

from conftest import RUN_ID, cluster_env, unused_address

from locking_center import AsyncClient, AsyncSession, Client, Session


def run(coro, timeout=90):
    async def bounded():
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


class Control:
    """The fixture's control API."""

    def __init__(self, address):
        self.address = address

    def call(self, path, method="GET"):
        req = urllib.request.Request("http://%s%s" % (self.address, path), data=b"" if method == "POST" else None, method=method)
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)

    def nodes(self):
        return self.call("/nodes")

    def leader(self):
        """The leader's node entry, once there is one."""
        view = self.call("/await-leader", "POST")
        return next(n for n in view["nodes"] if n["id"] == view["leader"])

    def key(self, key):
        """The key as the leader's JSON API shows it (None: not held)."""
        url = "http://%s/api/v1/keys/%s?consistent=1" % (self.leader()["web"], urllib.parse.quote(key, safe=""))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise


@pytest.fixture
def cluster():
    addresses, control = cluster_env("LC_TEST_CLUSTER", "LC_TEST_CLUSTER_CONTROL")
    ctl = Control(control)
    ctl.leader()
    yield addresses, ctl


async def until(predicate, deadline=15.0, what="condition"):
    end = time.monotonic() + deadline
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > end:
            raise AssertionError("%s not met within %gs" % (what, deadline))
        await asyncio.sleep(0.02)


def test_a_session_holding_10_keys_and_waiting_on_10_rides_through_a_kill_of_the_leader(cluster, capsys):
    addresses, ctl = cluster
    holds = ["py-fo-hold-%s-%d" % (RUN_ID, i) for i in range(10)]
    waits = ["py-fo-wait-%s-%d" % (RUN_ID, i) for i in range(10)]

    async def main():
        async with AsyncSession(addresses, ttl=10, source="py-failover-a") as a, AsyncSession(
            addresses, ttl=10, source="py-failover-b"
        ) as b:
            held = [await a.lock(k) for k in holds]
            blockers = [await b.lock(k) for k in waits]
            waiting = [asyncio.create_task(a.lock(k)) for k in waits]
            for k in waits:
                await until(lambda k=k: len((ctl.key(k) or {}).get("queue") or []) == 1, what="%s queued" % k)
            highest = max(g.token for g in held + blockers)

            killed_at = time.monotonic()
            killed = await asyncio.to_thread(ctl.call, "/kill-leader", "POST")
            try:
                probe = await a.try_lock("py-fo-probe-%s" % RUN_ID)  # sent once the session is back
                back = time.monotonic() - killed_at
                with capsys.disabled():
                    print("\nfailover seen by the client: kill -9 of %s -> session working again in %.2fs" % (killed["killed"], back))
                assert probe is not None
                await probe.unlock()
                assert a.error is None and b.error is None
                assert not any(w.done() for w in waiting), "a wait was answered while its key was held"
                # The holds are kept, with their tokens, by the same session.
                for g in held:
                    info = ctl.key(g.key)
                    assert info is not None and info["token"] == g.token and info["session"] == "%016x" % a.id, info
                # Every wait is queued again, once.
                for k in waits:
                    await until(lambda k=k: len((ctl.key(k) or {}).get("queue") or []) == 1, what="%s queued again" % k)
                # Granted in order as they are released, each once.
                tokens = []
                for i, blocker in enumerate(blockers):
                    await blocker.unlock()
                    g = await asyncio.wait_for(waiting[i], 20)
                    assert not any(w.done() for w in waiting[i + 1 :])
                    info = ctl.key(g.key)
                    assert info["token"] == g.token and info["session"] == "%016x" % a.id
                    assert g.token > highest and (not tokens or g.token > tokens[-1])
                    tokens.append(g.token)
                for g in held + [w.result() for w in waiting]:
                    await g.unlock()
                for k in holds + waits:
                    assert ctl.key(k) is None
            finally:
                await asyncio.to_thread(ctl.call, "/restart", "POST")

    run(main())


def test_a_lock_whose_answer_is_lost_returns_its_grant_after_the_reissue(cluster, capsys):
    addresses, ctl = cluster
    prefix = os.environ.get("LC_TEST_LOST_ANSWER_PREFIX")
    if not prefix:
        cluster_env("LC_TEST_LOST_ANSWER_PREFIX")
    key = "%spy-%s" % (prefix, RUN_ID)

    async def main():
        try:
            async with AsyncSession(addresses, ttl=10, source="py-lost-answer") as s:
                started = time.monotonic()
                # The leader commits the grant and dies before answering: the
                # reissue after the resume must find it, not wait behind it.
                g = await asyncio.wait_for(s.lock(key), 30)
                with capsys.disabled():
                    print("\nlost answer: grant returned by the reissue %.2fs after the Lock" % (time.monotonic() - started))
                view = ctl.nodes()
                assert not all(n["up"] for n in view["nodes"]), "the failpoint did not kill the leader: %r" % view
                info = ctl.key(key)
                assert info is not None and info["token"] == g.token and info["session"] == "%016x" % s.id, info
                assert not info.get("queue"), "the reissue queued behind its own grant: %r" % info
                await g.unlock()
                assert ctl.key(key) is None
        finally:
            await asyncio.to_thread(ctl.call, "/restart", "POST")

    run(main())


def test_a_followers_address_alone_works(cluster):
    _, ctl = cluster
    view = ctl.call("/await-leader", "POST")
    follower = next(n["address"] for n in view["nodes"] if n["up"] and n["id"] != view["leader"])
    key = "py-follower-%s" % RUN_ID
    with Session(follower, ttl=10) as s:
        with s.lock(key) as g:
            assert ctl.key(key)["token"] == g.token
    assert ctl.key(key) is None
    c = Client(follower)
    with c.lock(key):
        assert ctl.key(key) is not None
    assert ctl.key(key) is None

    async def main():
        async with AsyncClient(follower).lock(key):
            pass
        # Through that one address, a session rides through a kill of the
        # leader too: the follower drops the forwarded connection, and the
        # session resumes through it on the new leader.
        async with AsyncSession(follower, ttl=10) as s:
            g = await s.lock(key)
            try:
                await asyncio.to_thread(ctl.call, "/kill-leader", "POST")
                probe = await s.try_lock(key + "-probe")
                assert probe is not None
                await probe.unlock()
                info = ctl.key(key)
                assert info["token"] == g.token and info["session"] == "%016x" % s.id, info
                await g.unlock()
            finally:
                await asyncio.to_thread(ctl.call, "/restart", "POST")

    run(main())


def test_a_list_of_addresses_connects_to_any_that_answers(cluster):
    addresses, ctl = cluster
    dead = [unused_address() for _ in range(3)]
    key = "py-list-%s" % RUN_ID
    nodes = addresses.split(",")
    forms = (
        ",".join(dead + nodes[:1]),  # one string, comma-separated
        dead + nodes[1:2],  # a list of strings
        [(h, int(p)) for h, p in (x.rsplit(":", 1) for x in dead + nodes[2:3])],  # a list of (host, port)
    )
    for form in forms:
        for _ in range(4):  # random order: the dead ones come first some of the time
            with Session(form, ttl=5, connect_timeout=2) as s:
                with s.lock(key):
                    pass
            Client(form).lock(key).unlock()


def test_a_name_with_several_records_connects_to_any(monkeypatch):
    address = os.environ.get("LC_TEST_ADDRESS")
    if not address:
        pytest.skip("LC_TEST_ADDRESS is not set")
    port = int(address.rsplit(":", 1)[1])
    real = socket.getaddrinfo
    tried = []

    def getaddrinfo(host, *args, **kw):
        if host == "lc.cluster.test":
            # Two records where nothing listens (127.0.0.2 and .3: the
            # server listens on 127.0.0.1 only), and the server's.
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.1")]
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    key = "py-dns-%s" % RUN_ID
    for _ in range(6):
        with Session("lc.cluster.test:%d" % port, ttl=5) as s:
            tried.append(s.address)
            with s.lock(key):
                pass
        Client("lc.cluster.test:%d" % port).lock(key).unlock()
    assert all(w.endswith("(127.0.0.1)") for w in tried), tried
