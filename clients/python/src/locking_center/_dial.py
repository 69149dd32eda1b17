"""Connecting: several addresses, every DNS record of each, TLS.

A client is given one address or several (a cluster's nodes, or a DNS name
with a record per node).  Each connection attempt resolves every name, puts
the endpoints in a random order (so that clients spread over the nodes and
none waits on a dead one first every time), and tries them one after
another, each within its own timeout, until one connects (and completes
the TLS handshake).  Any node of a cluster will do: a follower forwards to
the leader.
"""

from __future__ import annotations

import asyncio
import random
import socket
import ssl
import time
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _protocol as proto
from ._protocol import Address
from .errors import InvalidRequestError, UnreachableError

#: One address, a comma-separated list of them ("a:22119,b:22119"), or a
#: list of addresses (strings or ``(host, port)`` tuples).
Addresses = Union[Address, Sequence[Address]]


class Endpoint(NamedTuple):
    """One resolved place to connect: the socket address, and the name the
    server's certificate must carry."""

    family: int
    sockaddr: Tuple  # type: ignore[type-arg]
    name: str  # the host as given (the TLS server name)
    where: str  # how errors name it: host:port, and the record when it differs


def parse_addresses(address: Addresses) -> List[Tuple[str, int]]:
    """Split one address, a comma-separated list, or a list of addresses."""
    if isinstance(address, tuple) and len(address) == 2 and isinstance(address[1], int):
        return [proto.parse_address(address)]  # type: ignore[arg-type]
    if isinstance(address, str):
        parts: List[Address] = [p.strip() for p in address.split(",") if p.strip()]
    else:
        parts = list(address)  # type: ignore[arg-type]
    if not parts:
        raise InvalidRequestError("no address given")
    return [proto.parse_address(p) for p in parts]


def describe(targets: Sequence[Tuple[str, int]]) -> str:
    """The addresses as ``host:port[,host:port…]``, for messages."""
    return ",".join(_hostport(h, p) for h, p in targets)


def _hostport(host: str, port: int) -> str:
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _endpoints(host: str, port: int, infos: list) -> List[Endpoint]:  # type: ignore[type-arg]
    out = []
    seen = set()
    for family, _, _, _, sockaddr in infos:
        if sockaddr in seen:
            continue
        seen.add(sockaddr)
        where = _hostport(host, port)
        if sockaddr[0] != host:
            where += " (%s)" % sockaddr[0]
        out.append(Endpoint(family, sockaddr, host, where))
    return out


def resolve(targets: Sequence[Tuple[str, int]], errors: List[str]) -> List[Endpoint]:
    """Every endpoint of every address, in a random order; a name that does
    not resolve adds its error to ``errors``."""
    out: List[Endpoint] = []
    for host, port in targets:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            errors.append("%s: %s" % (_hostport(host, port), e))
            continue
        out += _endpoints(host, port, infos)
    random.shuffle(out)
    return out


async def resolve_async(targets: Sequence[Tuple[str, int]], errors: List[str]) -> List[Endpoint]:
    """:func:`resolve` on the running loop's resolver."""
    loop = asyncio.get_running_loop()
    out: List[Endpoint] = []
    for host, port in targets:
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            errors.append("%s: %s" % (_hostport(host, port), e))
            continue
        out += _endpoints(host, port, infos)
    random.shuffle(out)
    return out


def unreachable(targets: Sequence[Tuple[str, int]], errors: List[str], last: Optional[BaseException]) -> UnreachableError:
    """The error of a round in which no endpoint answered; ``last`` (the
    last attempt's exception, an :class:`ssl.SSLError` for a refused
    certificate) becomes its cause."""
    err = UnreachableError("cannot connect to %s: %s" % (describe(targets), "; ".join(errors) or "no address"))
    err.__cause__ = last
    return err


def connect(
    targets: Sequence[Tuple[str, int]],
    timeout: float,
    tls: Optional[ssl.SSLContext],
    server_hostname: Optional[str],
    deadline: Optional[float] = None,
) -> Tuple[socket.socket, str]:
    """Connect to the first endpoint that answers, each attempt within
    ``timeout`` seconds (and all before ``deadline``, a monotonic time);
    the socket (TLS when ``tls`` is given) and the endpoint's name.

    :raises socket.timeout: ``deadline`` passed.
    :raises UnreachableError: no endpoint answered.
    """
    errors: List[str] = []
    last: Optional[BaseException] = None
    for ep in resolve(targets, errors):
        t = timeout
        if deadline is not None:
            t = min(t, deadline - time.monotonic())
            if t <= 0:
                raise socket.timeout("deadline passed while connecting")
        sock = socket.socket(ep.family, socket.SOCK_STREAM)
        try:
            sock.settimeout(t)
            sock.connect(ep.sockaddr)
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=server_hostname or ep.name)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock, ep.where
        except OSError as e:  # ssl.SSLError and socket.timeout are OSErrors
            sock.close()
            last = e
            errors.append("%s: %s" % (ep.where, "timed out after %gs" % t if isinstance(e, socket.timeout) else e))
    if deadline is not None and time.monotonic() >= deadline:
        raise socket.timeout("deadline passed while connecting")
    raise unreachable(targets, errors, last)


async def connect_async(
    targets: Sequence[Tuple[str, int]],
    timeout: float,
    tls: Optional[ssl.SSLContext],
    server_hostname: Optional[str],
    deadline: Optional[float] = None,
) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter, str]:
    """:func:`connect` on asyncio: the streams and the endpoint's name.

    :raises TimeoutError: ``deadline`` passed.
    :raises UnreachableError: no endpoint answered.
    """
    errors: List[str] = []
    last: Optional[BaseException] = None
    for ep in await resolve_async(targets, errors):
        t = timeout
        if deadline is not None:
            t = min(t, deadline - time.monotonic())
            if t <= 0:
                raise TimeoutError("deadline passed while connecting")
        try:
            async with asyncio.timeout(t):
                reader, writer = await asyncio.open_connection(
                    ep.sockaddr[0],
                    ep.sockaddr[1],
                    family=ep.family,
                    ssl=tls,
                    server_hostname=(server_hostname or ep.name) if tls is not None else None,
                )
            return reader, writer, ep.where
        except TimeoutError as e:
            last = e
            errors.append("%s: timed out after %gs" % (ep.where, t))
        except OSError as e:
            last = e
            errors.append("%s: %s" % (ep.where, e))
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError("deadline passed while connecting")
    raise unreachable(targets, errors, last)
