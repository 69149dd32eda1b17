"""The awaitable hold that ``lock`` returns in the asyncio client and session."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Coroutine, Generator, Optional, Protocol, Type, TypeVar


class _Hold(Protocol):
    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...


H = TypeVar("H", bound=_Hold)


class AwaitableHold(Coroutine[Any, Any, H]):
    """A coroutine that is also an async context manager: ``await`` it for
    the hold, or ``async with`` it to hold the key for the block (the hold's
    own ``__aenter__`` and ``__aexit__`` run)."""

    __slots__ = ("_coro", "_hold")

    def __init__(self, coro: Coroutine[Any, Any, H]) -> None:
        self._coro = coro
        self._hold: Optional[H] = None

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, H]:
        return self._coro.__await__()

    async def __aenter__(self) -> H:
        self._hold = await self._coro
        return await self._hold.__aenter__()

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self._hold is not None
        await self._hold.__aexit__(exc_type, exc, tb)
