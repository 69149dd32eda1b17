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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class OwnServer:
    """A server of this test's own, from $LC_SERVER_BIN, on free loopback ports.

    ``start()`` waits for GET /readyz 200; ``stop()`` sends SIGTERM to the PID
    and waits for it.  ``start()`` again reuses the same ports and settings
    (a restart).
    """

    def __init__(self, tmp_path, **env):
        self.bin = env_or_skip("LC_SERVER_BIN")
        self.tcp_port, self.web_port = free_port(), free_port()
        self.address = "127.0.0.1:%d" % self.tcp_port
        self.web_address = "127.0.0.1:%d" % self.web_port
        self.env = dict(os.environ, BIND_ADDRESS=self.address, WEB_ADDRESS=self.web_address)
        self.env.update({k: str(v) for k, v in env.items()})
        self.log_path = tmp_path / ("server-%d.log" % self.tcp_port)
        self.proc = None

    def start(self, deadline=10.0):
        import subprocess

        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.bin], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError("server exited with %s; log:\n%s" % (self.proc.returncode, self.log_path.read_text()))
            try:
                with urllib.request.urlopen("http://%s/readyz" % self.web_address, timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise AssertionError("server not ready in %gs; log:\n%s" % (deadline, self.log_path.read_text()))

    def stop(self):
        import signal

        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def own_server(tmp_path):
    """Factory of servers of the test's own; every one is stopped at teardown."""
    servers = []

    def make(**env):
        servers.append(OwnServer(tmp_path, **env))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


def web_json(web_address, path, method="GET", body=None):
    """Call the JSON API; the decoded answer (None for 404)."""
    data = (b"" if method == "POST" else None) if body is None else json.dumps(body).encode()
    req = urllib.request.Request("http://%s%s" % (web_address, path), data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def cluster_env(*names):
    """The values of the fixture's variables; a test that needs one that is
    not set fails under CI=true (clients/run-tests provides them) and is
    skipped, loudly, otherwise."""
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        why = "%s not set (clients/run-tests starts the cluster and TLS fixture and sets them)" % ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(why + "; CI=true: not skipped")
        pytest.skip("NOT RUN: " + why)
    values = [os.environ[n] for n in names]
    return values[0] if len(values) == 1 else values
