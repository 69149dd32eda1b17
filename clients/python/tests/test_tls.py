"""TLS against the fixture's servers ($LC_TEST_TLS_ADDRESS with TLS_CERT and
TLS_KEY; $LC_TEST_MTLS_ADDRESS with TLS_CLIENT_CA too; $LC_TEST_TLS_DIR with
ca.pem, client.pem, client-key.pem and other-ca.pem): the server's
certificate and name checked, mutual TLS with and without a client
certificate."""

import asyncio
import os
import ssl

import pytest

from conftest import RUN_ID, cluster_env

from locking_center import AsyncClient, AsyncSession, Client, Session, UnreachableError


@pytest.fixture
def tls():
    address, mtls, folder = cluster_env("LC_TEST_TLS_ADDRESS", "LC_TEST_MTLS_ADDRESS", "LC_TEST_TLS_DIR")
    return address, mtls, folder


def context(folder, ca="ca.pem", client_cert=False):
    ctx = ssl.create_default_context(cafile=os.path.join(folder, ca))
    if client_cert:
        ctx.load_cert_chain(os.path.join(folder, "client.pem"), os.path.join(folder, "client-key.pem"))
    return ctx


def refused_by_verification(excinfo):
    """The UnreachableError carries the certificate check's error as its cause."""
    cause = excinfo.value.__cause__
    assert isinstance(cause, ssl.SSLCertVerificationError), repr(cause)


def test_session_and_clients_over_tls(tls):
    address, _, folder = tls
    ctx = context(folder)
    key = "py-tls-%s" % RUN_ID
    port = address.rsplit(":", 1)[1]
    for where in (address, "localhost:%s" % port):  # the certificate names both
        with Session(where, ssl=ctx, ttl=5) as s:
            with s.lock(key) as g:
                assert g.token > 0
                assert s.try_lock(key) is None
        c = Client(where, ssl=ctx)
        with c.lock(key):
            assert c.try_lock(key) is False

    async def main():
        async with AsyncSession(address, ssl=ctx) as s:
            async with s.lock(key):
                pass
        async with AsyncClient(address, ssl=ctx).lock(key):
            pass

    asyncio.run(main())


def test_a_wrong_server_name_is_refused(tls):
    address, _, folder = tls
    ctx = context(folder)
    with pytest.raises(UnreachableError) as e:
        Session(address, ssl=ctx, server_hostname="wrong.invalid", connect_timeout=5)
    refused_by_verification(e)
    with pytest.raises(UnreachableError) as e:
        Client(address, ssl=ctx, server_hostname="wrong.invalid").try_lock("py-tls-wrong")
    refused_by_verification(e)
    with pytest.raises(UnreachableError) as e:
        asyncio.run(AsyncClient(address, ssl=ctx, server_hostname="wrong.invalid").try_lock("py-tls-wrong"))
    refused_by_verification(e)


def test_a_certificate_of_another_ca_is_refused(tls):
    address, _, folder = tls
    ctx = context(folder, ca="other-ca.pem")
    with pytest.raises(UnreachableError) as e:
        asyncio.run(AsyncSession(address, ssl=ctx).open())
    refused_by_verification(e)
    with pytest.raises(UnreachableError) as e:
        Client(address, ssl=ctx).try_lock("py-tls-other")
    refused_by_verification(e)


def test_mutual_tls_with_a_client_certificate(tls):
    _, mtls, folder = tls
    ctx = context(folder, client_cert=True)
    key = "py-mtls-%s" % RUN_ID
    with Session(mtls, ssl=ctx, ttl=5) as s:
        with s.lock(key) as g:
            assert g.token > 0
    with Client(mtls, ssl=ctx).lock(key):
        pass


def test_mutual_tls_without_a_client_certificate_is_refused(tls):
    _, mtls, folder = tls
    ctx = context(folder)
    with pytest.raises(UnreachableError):
        Session(mtls, ssl=ctx, connect_timeout=5)
    with pytest.raises(UnreachableError):
        Client(mtls, ssl=ctx).try_lock("py-mtls-none")
    with pytest.raises(UnreachableError):
        asyncio.run(AsyncClient(mtls, ssl=ctx).try_lock("py-mtls-none"))


def test_plain_tcp_to_a_tls_server_fails(tls):
    address, _, _ = tls
    with pytest.raises(UnreachableError):
        Session(address, connect_timeout=3)
