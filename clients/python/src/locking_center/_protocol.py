"""Wire protocol: frame encoding, validation, answers, addresses.

A request is one frame on its own TCP connection::

    +--------+---------+-----------------+------------+----------------------+
    | action | keySize | key             | sourceSize | source               |
    | 1 byte | 1 byte  | keySize bytes   | 1 byte     | sourceSize bytes     |
    +--------+---------+-----------------+------------+----------------------+

Sizes are signed bytes, so a key or source is at most 127 bytes.  The
answer is a single byte: ``+`` success, ``-`` failure, ``#`` try-lock not
won.
"""

from __future__ import annotations

import enum
from typing import Tuple, Union

from .errors import InvalidRequestError, ProtocolError

DEFAULT_PORT = 22119
MAX_FIELD_BYTES = 127

OK = 0x2B  # '+'
FAIL = 0x2D  # '-'
NOT_WON = 0x23  # '#'

Text = Union[str, bytes]
Address = Union[str, Tuple[str, int]]


class Action(enum.IntEnum):
    LOCK = 1
    UNLOCK = 2
    RESET_BY_KEY = 3
    RESET_BY_SOURCE = 4
    TRY_LOCK = 5


def _to_bytes(value: Text, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("%s must be str or bytes, not %s" % (what, type(value).__name__))


def _encode_field(value: Text, what: str) -> bytes:
    raw = _to_bytes(value, what)
    if len(raw) > MAX_FIELD_BYTES:
        raise InvalidRequestError(
            "%s is %d bytes long; at most %d are allowed" % (what, len(raw), MAX_FIELD_BYTES)
        )
    return raw


def encode_key(key: Text) -> bytes:
    """Return the key's bytes, refusing an empty or over-long key."""
    raw = _encode_field(key, "key")
    if not raw:
        raise InvalidRequestError("key is empty")
    return raw


def encode_source(source: Text) -> bytes:
    """Return the source's bytes, refusing an over-long source."""
    return _encode_field(source, "source")


def encode_frame(action: int, key: Text, source: Text) -> bytes:
    """Encode one request frame, validating it first.

    ResetBySource takes no key (an empty one is sent); every other action
    needs a key of 1..127 bytes.
    """
    try:
        act = Action(action)
    except ValueError:
        raise InvalidRequestError("unknown action %r" % (action,)) from None
    k = _encode_field(key, "key") if act is Action.RESET_BY_SOURCE else encode_key(key)
    s = encode_source(source)
    return bytes((act, len(k))) + k + bytes((len(s),)) + s


def check_answer(answer: int, allowed: Tuple[int, ...]) -> int:
    if answer not in allowed:
        raise ProtocolError("unexpected answer byte 0x%02x" % answer)
    return answer


def parse_address(address: Address) -> Tuple[str, int]:
    """Split ``host:port``, ``[v6]:port`` or ``host`` (default port 22119)."""
    if isinstance(address, tuple):
        host, port = address
        return str(host), int(port)
    if not isinstance(address, str) or not address:
        raise InvalidRequestError("address must be a non-empty 'host:port' string")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise InvalidRequestError("address %r: missing ']'" % address)
        host, rest = address[1:end], address[end + 1 :]
        if not rest:
            return host, DEFAULT_PORT
        if not rest.startswith(":"):
            raise InvalidRequestError("address %r: expected ':' after ']'" % address)
        port_text = rest[1:]
    elif address.count(":") == 1:
        host, port_text = address.split(":")
    else:  # a bare host name or IPv6 literal
        return address, DEFAULT_PORT
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidRequestError("address %r: port is not a number" % address) from None
    if not 0 < port < 65536:
        raise InvalidRequestError("address %r: port out of range" % address)
    return host or "localhost", port
