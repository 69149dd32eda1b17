import json
import os
import pathlib
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

HERE = pathlib.Path(__file__).resolve().parent
RUN_ID = uuid.uuid4().hex[:10]


def load_vectors():
    path = os.environ.get("LC_VECTORS") or str(HERE.parents[2] / "wire" / "testdata" / "vectors.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def env_or_skip(name):
    value = os.environ.get(name)
    if not value:
        pytest.skip("%s is not set (clients/run-tests sets it)" % name)
    return value


@pytest.fixture(scope="session")
def server_address():
    return env_or_skip("LC_TEST_ADDRESS")


@pytest.fixture(scope="session")
def web_address():
    return env_or_skip("LC_TEST_WEB_ADDRESS")


@pytest.fixture
def key(request):
    """A key no other test run or client suite uses; reset after the test."""
    k = "py-%s-%s-%s" % (request.node.name[:40].strip("[]"), RUN_ID, uuid.uuid4().hex[:6])
    yield k
    addr = os.environ.get("LC_TEST_ADDRESS")
    if addr:
        from locking_center import Client, LockingCenterError

        try:
            Client(addr, io_timeout=5).reset_by_key(k)
        except LockingCenterError:
            pass


def unused_address():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "127.0.0.1:%d" % port


def key_info(web_address, key):
    """GET /api/v1/keys/{key}: the decoded JSON, or None when the key is not held."""
    url = "http://%s/api/v1/keys/%s" % (web_address, urllib.parse.quote(key, safe=""))
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def wait_for_queue(web_address, key, length, deadline=5.0):
    """Poll the JSON API until ``key``'s wait queue has ``length`` entries."""
    end = time.monotonic() + deadline
    info = None
    while time.monotonic() < end:
        try:
            info = key_info(web_address, key)
        except (OSError, ValueError):
            info = None
        queue = (info or {}).get("queue") or []
        if info is not None and len(queue) == length:
            return info
        time.sleep(0.02)
    raise AssertionError("queue of %r did not reach %d entries in %gs; last: %r" % (key, length, deadline, info))
