"""Locking-Center client: named, FIFO-fair locks held on a Locking-Center server.

>>> from locking_center import Client
>>> client = Client("127.0.0.1:22119", source="billing")
>>> with client.lock("invoices/2026-11", timeout=10):
...     ...  # only one holder of the key at a time

:class:`Client` blocks; :class:`AsyncClient` is its asyncio twin.
"""

from ._protocol import DEFAULT_PORT, MAX_FIELD_BYTES, Action, encode_frame
from .aio import AsyncClient, AsyncHeldLock
from .client import Client, HeldLock
from .errors import (
    InvalidRequestError,
    LockCancelledError,
    LockingCenterError,
    LockTimeoutError,
    NotWonError,
    ProtocolError,
    RefusedError,
    ResetWhileWaitingError,
    UnreachableError,
)

__version__ = "0.1.0"

__all__ = [
    "Action",
    "AsyncClient",
    "AsyncHeldLock",
    "Client",
    "DEFAULT_PORT",
    "HeldLock",
    "InvalidRequestError",
    "LockCancelledError",
    "LockTimeoutError",
    "LockingCenterError",
    "MAX_FIELD_BYTES",
    "NotWonError",
    "ProtocolError",
    "RefusedError",
    "ResetWhileWaitingError",
    "UnreachableError",
    "encode_frame",
]
