"""AReaL's per-tracker surface on top of rltel's tracker: timing keys, scope helpers.

:class:`DistributedStatsTracker` here is the class ``stats_tracker.get(name)`` returns.
It adds what AReaL's ``areal.utils.stats_tracker.DistributedStatsTracker`` has beyond
recording, with AReaL's keys:

- ``record_timing(key)`` records ``timeperf/<key>`` whatever the scope or tracker name
  (AReaL fixes timing records under ``timeperf``);
- ``scope_func_wrapper(name)`` decorates a function (sync or async) to run in ``scope(name)``;
- ``disable_scope()`` records bare keys inside it: no enclosing scope and no tracker name
  (AReaL clears its whole scope stack, which holds the tracker name too); scopes opened
  inside it still nest;
- ``scope(name)`` strips ``/`` from the ends of ``name``, as AReaL does.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from telemetry.record import phase
from telemetry.record import tracker as _tracker

__all__ = ["DistributedStatsTracker"]

F = TypeVar("F", bound=Callable[..., Any])


class DistributedStatsTracker(_tracker.DistributedStatsTracker):
    """rltel's tracker plus AReaL's timing keys, ``scope_func_wrapper``, ``disable_scope``."""

    def __init__(self, name: str = "") -> None:
        super().__init__(name.strip("/"))
        self._bare: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"rltel_bare_{self.name or 'default'}_{id(self)}", default=False
        )

    def full_key(self, key: str) -> str:
        """``key`` under the tracker name and scope; inside :meth:`disable_scope`, the scopes
        opened there only."""
        if not self._bare.get():
            return super().full_key(key)
        return "/".join(part for part in (*self._scope.get(), key) if part)

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest keys recorded inside under ``name`` (``/`` stripped from its ends)."""
        with super().scope(name.strip("/")):
            yield

    @contextmanager
    def disable_scope(self) -> Iterator[None]:
        """Record bare keys inside (no enclosing scope, no tracker name), as AReaL does."""
        scope_token = self._scope.set(())
        bare_token = self._bare.set(True)
        try:
            yield
        finally:
            self._bare.reset(bare_token)
            self._scope.reset(scope_token)

    @contextmanager
    def record_timing(self, key: str) -> Iterator[None]:
        """Record the block's wall time (seconds) as scalar ``timeperf/<key>``.

        The key is AReaL's: ``timeperf/<key>`` in any scope and in any named tracker.
        """
        start = time.perf_counter()
        phase.enter(key)
        try:
            yield
        finally:
            phase.leave(key)
            elapsed = time.perf_counter() - start
            with self.disable_scope():
                self.scalar(**{f"timeperf/{key}": elapsed})

    def scope_func_wrapper(self, name: str) -> Callable[[F], F]:
        """A decorator running the function (or coroutine function) inside ``scope(name)``."""

        def decorator(func: F) -> F:
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.scope(name):
                        return await func(*args, **kwargs)

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.scope(name):
                    return func(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorator

    def export(
        self,
        key: str | None = None,
        reduce_group: Any = None,
        key_sync_group: Any = None,
        reset: bool = True,
    ):
        """AReaL's ``export``: this tracker's keys (under ``key`` if given) as a flat dict.

        ``reduce_group=None`` is rank-local (no collective); ``key_sync_group`` is the
        group that keys with a per-key ``reduce_group`` are reduced over (AReaL's).
        """
        return super().export(
            key=key, reduce_group=reduce_group, key_sync_group=key_sync_group, reset=reset
        )
