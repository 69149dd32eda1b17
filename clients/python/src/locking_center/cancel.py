"""CancelEvent: a threading.Event that wakes a blocked call the moment it is set."""

from __future__ import annotations

import threading
from typing import Callable, List

__all__ = ["CancelEvent"]


class CancelEvent(threading.Event):
    """A :class:`threading.Event` whose :meth:`set` also gives up, at once,
    the calls it was passed to as ``cancel=`` (no polling).

    Set it from any thread.  A call that starts with it already set gives up
    before sending anything.  A plain :class:`threading.Event` cannot wake a
    blocked call without polling, so ``cancel=`` takes this subclass.
    """

    def __init__(self) -> None:
        super().__init__()
        # Guards _callbacks, and orders set() against _add/_remove so that a
        # callback added during set() runs exactly once.
        self._callbacks_lock = threading.Lock()
        self._callbacks: List[Callable[[], None]] = []

    def set(self) -> None:
        with self._callbacks_lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    def _add(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the event is set (now, if it is)."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def _remove(self, fn: Callable[[], None]) -> None:
        with self._callbacks_lock:
            try:
                self._callbacks.remove(fn)
            except ValueError:
                pass


def check_cancel(cancel: object) -> None:
    """Refuse a ``cancel=`` that is not a :class:`CancelEvent`."""
    if cancel is not None and not isinstance(cancel, CancelEvent):
        raise TypeError(
            "cancel must be a locking_center.CancelEvent (a threading.Event that wakes the call when set), not %s"
            % type(cancel).__name__
        )
