"""Locking-Center client: named, FIFO-fair locks held on a Locking-Center server.

Sessions are the recommended way: their holds end with their holder (a
crashed program's keys free themselves one TTL later), and every grant
carries a fencing token.

>>> from locking_center import Session
>>> with Session("127.0.0.1:22119", ttl=10, source="billing") as session:
...     with session.lock("invoices/2026-11", timeout=30) as grant:
...         ...  # only one holder at a time; pass grant.token to the resource

:class:`AsyncSession` is the asyncio session (:class:`Session` is a
thread-safe blocking face over one of them).  :class:`Client` and
:class:`AsyncClient` speak the one-request-per-connection protocol, whose
holds outlive their holder.
"""

from ._protocol import (
    DEFAULT_PORT,
    MAX_FIELD_BYTES,
    Action,
    OpenAnswer,
    SessionAction,
    SessionAnswer,
    decode_answer,
    decode_open_answer,
    encode_frame,
    encode_open,
    encode_request,
)
from .aio import AsyncClient, AsyncHeldLock
from .cancel import CancelEvent
from .client import Client, HeldLock
from .errors import (
    DisconnectedError,
    InvalidRequestError,
    LockCancelledError,
    LockingCenterError,
    LockTimeoutError,
    NotHeldError,
    NotWonError,
    OutcomeUnknownError,
    ProtocolError,
    RefusedError,
    ResetWhileWaitingError,
    SessionClosedError,
    SessionLostError,
    UnreachableError,
)
from .session import DEFAULT_ANSWER_TIMEOUT, AsyncGrant, AsyncSession
from .sync_session import Grant, Session

__version__ = "0.2.0"

__all__ = [
    "Action",
    "AsyncClient",
    "AsyncGrant",
    "AsyncHeldLock",
    "AsyncSession",
    "CancelEvent",
    "Client",
    "DEFAULT_ANSWER_TIMEOUT",
    "DEFAULT_PORT",
    "DisconnectedError",
    "Grant",
    "HeldLock",
    "InvalidRequestError",
    "LockCancelledError",
    "LockTimeoutError",
    "LockingCenterError",
    "MAX_FIELD_BYTES",
    "NotHeldError",
    "NotWonError",
    "OpenAnswer",
    "OutcomeUnknownError",
    "ProtocolError",
    "RefusedError",
    "ResetWhileWaitingError",
    "Session",
    "SessionAction",
    "SessionAnswer",
    "SessionClosedError",
    "SessionLostError",
    "UnreachableError",
    "decode_answer",
    "decode_open_answer",
    "encode_frame",
    "encode_open",
    "encode_request",
]
