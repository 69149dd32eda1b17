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
from typing import NamedTuple, Tuple, Union

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


# -- sessions (first byte 16) ------------------------------------------------
#
# Open, 16 + s + a bytes, and its 13-byte answer::
#
#     +--------+---------+--------+--------+------------+--------+----------+------+
#     | 16     | version | ttl_ms | resume | sourceSize | source | authSize | auth |
#     | 1 B    | 1 B = 1 | 4 B    | 8 B    | 1 B = s    | s B    | 1 B = a  | a B  |
#     +--------+---------+--------+--------+------------+--------+----------+------+
#     answer: [status:1][ttl_ms:4][session:8]
#
# Request, 14 + k bytes, and its 13-byte answer::
#
#     +--------+-----+-------+---------+-----+
#     | action | id  | token | keySize | key |
#     | 1 B    | 4 B | 8 B   | 1 B = k | k B |
#     +--------+-----+-------+---------+-----+
#     answer: [id:4][status:1][token:8]
#
# Integers are big-endian and unsigned.

SESSION_OPEN = 16
SESSION_VERSION = 1
ANSWER_SIZE = 13
MAX_ID = 0xFFFFFFFF
MAX_TOKEN = 0xFFFFFFFFFFFFFFFF


class SessionAction(enum.IntEnum):
    """Action numbers of the requests inside a session."""

    LOCK = 1
    UNLOCK = 2
    RESET_BY_KEY = 3
    RESET_BY_SOURCE = 4
    TRY_LOCK = 5
    CANCEL = 6
    PING = 7
    CLOSE = 8


# Actions whose key field must hold 1..127 bytes; ResetBySource carries an
# optional source there, and Cancel, Ping and Close send none.
_NEEDS_KEY = frozenset((SessionAction.LOCK, SessionAction.UNLOCK, SessionAction.RESET_BY_KEY, SessionAction.TRY_LOCK))


class OpenAnswer(NamedTuple):
    """The server's 13-byte answer to an open: status byte, TTL granted, session id."""

    status: int
    ttl_ms: int
    session: int


class SessionAnswer(NamedTuple):
    """A 13-byte answer to a session request: the request's id, status byte, token."""

    id: int
    status: int
    token: int


def _uint(value: int, bits: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << bits):
        raise InvalidRequestError("%s must be an integer in 0..%d, not %r" % (what, (1 << bits) - 1, value))
    return value


def encode_open(version: int, ttl_ms: int, resume: int, source: Text, auth: Text) -> bytes:
    """Encode a session open (``resume`` 0: a new session), validating it first."""
    s = _encode_field(source, "source")
    a = _encode_field(auth, "auth")
    head = bytes((SESSION_OPEN, _uint(version, 8, "version")))
    head += _uint(ttl_ms, 32, "ttl_ms").to_bytes(4, "big") + _uint(resume, 64, "resume").to_bytes(8, "big")
    return head + bytes((len(s),)) + s + bytes((len(a),)) + a


def decode_open_answer(data: bytes) -> OpenAnswer:
    """Decode the 13-byte answer to an open."""
    if len(data) != ANSWER_SIZE:
        raise ProtocolError("an open answer is %d bytes, not %d" % (ANSWER_SIZE, len(data)))
    return OpenAnswer(data[0], int.from_bytes(data[1:5], "big"), int.from_bytes(data[5:13], "big"))


def encode_request(action: int, id: int, token: int, key: Text) -> bytes:
    """Encode one session request, validating it first.

    Lock, TryLock, Unlock and ResetByKey need a key of 1..127 bytes;
    ResetBySource carries the source to reset (0..127 bytes, empty: the
    peer's IP) in the key field; Cancel, Ping and Close send ``b""``.
    """
    try:
        act = SessionAction(action)
    except ValueError:
        raise InvalidRequestError("unknown session action %r" % (action,)) from None
    k = encode_key(key) if act in _NEEDS_KEY else _encode_field(key, "key")
    head = bytes((act,)) + _uint(id, 32, "id").to_bytes(4, "big") + _uint(token, 64, "token").to_bytes(8, "big")
    return head + bytes((len(k),)) + k


def decode_answer(data: bytes) -> SessionAnswer:
    """Decode one 13-byte session answer."""
    if len(data) != ANSWER_SIZE:
        raise ProtocolError("a session answer is %d bytes, not %d" % (ANSWER_SIZE, len(data)))
    return SessionAnswer(int.from_bytes(data[0:4], "big"), data[4], int.from_bytes(data[5:13], "big"))
