"""One sink call at a time on a thread of its own, under a timeout.

A call that outlives its timeout is abandoned (it keeps running: Python cannot stop a
thread) and the caller learns it at once; while it still runs, further calls fail fast
instead of entering the sink concurrently. Whatever the call raises, ``BaseException``
included, is re-raised on the calling thread.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Stalled", "TimedCaller", "reraise_at_exit"]

T = TypeVar("T")


class Stalled(Exception):
    """The sink stalls: a call did not finish within its timeout (it keeps running,
    abandoned), or, with ``earlier``, an abandoned call still runs, so this one was not made
    (the sink is not entered concurrently).

    Attributes:
        earlier: True when the stall is an earlier call's and ``fn`` was not called.
    """

    def __init__(self, earlier: bool = False) -> None:
        super().__init__()
        self.earlier = earlier


class TimedCaller:
    """Runs calls into one sink, each on a named daemon thread, under a timeout.

    Args:
        name: the threads' name (``<name>-call``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._stalled: threading.Thread | None = None

    @property
    def stalled(self) -> bool:
        """True while an abandoned call is still running."""
        return self._stalled is not None and self._stalled.is_alive()

    def join_stalled(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for an abandoned call to finish."""
        if self._stalled is not None:
            self._stalled.join(max(0.0, timeout_s))

    def call(self, fn: Callable[[], T], timeout_s: float) -> T:
        """Run ``fn`` and return its result; re-raise what it raised.

        Raises:
            Stalled: ``fn`` outlived ``timeout_s`` and is abandoned; or, with ``earlier``,
                an earlier abandoned call is still running (``fn`` is not called).
        """
        if self._stalled is not None:
            if self._stalled.is_alive():
                raise Stalled(earlier=True)
            self._stalled = None
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"{self.name}-call", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self._stalled = thread
            raise Stalled
        if "error" in box:
            raise box["error"]
        return box["value"]


def reraise_at_exit(exc: BaseException) -> None:
    """Re-raise ``exc`` only while the interpreter itself is shutting down."""
    if sys.is_finalizing():
        raise exc
