"""A tracker's key names, AReaL's rules written once: its name, scopes, bare and timing keys.

Keys are ``<tracker name>/<scope>/.../<key>``. The scope stack is per thread and per
asyncio task. As in AReaL's ``areal.utils.stats_tracker``:

- ``scope(name)`` strips ``/`` from the ends of ``name`` (and the tracker name too);
- inside ``bare()`` (AReaL's ``disable_scope``) keys have no enclosing scope and no tracker
  name (AReaL clears its whole scope stack, which holds the name too); scopes opened
  inside it still nest;
- a timing is ``timeperf/<name>`` (:func:`timing_key`), recorded bare: the same key in any
  scope and any named tracker.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from telemetry.model.units import TIMING_SCOPE

__all__ = ["TIMING_SCOPE", "KeyScope", "timing_key"]

F = TypeVar("F", bound=Callable[..., Any])


def timing_key(name: str) -> str:
    """AReaL's key of ``record_timing(name)``: ``timeperf/<name>``."""
    return f"{TIMING_SCOPE}/{name}"


class KeyScope:
    """One tracker's name and scope stack (``name`` stripped of ``/``; "" for the default)."""

    def __init__(self, name: str = "") -> None:
        self.name = name.strip("/")
        tag = f"{self.name or 'default'}_{id(self)}"
        self._scope: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"rltel_scope_{tag}", default=()
        )
        self._bare: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"rltel_bare_{tag}", default=False
        )

    def full(self, key: str) -> str:
        """``key`` under the name and the open scopes (inside :meth:`bare`, its scopes only)."""
        if self._bare.get():
            return "/".join(part for part in (*self._scope.get(), key) if part)
        return "/".join(part for part in (self.name, *self._scope.get(), key) if part)

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest keys recorded inside under ``name`` (``/`` stripped from its ends)."""
        token = self._scope.set((*self._scope.get(), name.strip("/")))
        try:
            yield
        finally:
            self._scope.reset(token)

    @contextmanager
    def bare(self) -> Iterator[None]:
        """Keys inside have no enclosing scope and no tracker name (AReaL's
        ``disable_scope``)."""
        scope_token = self._scope.set(())
        bare_token = self._bare.set(True)
        try:
            yield
        finally:
            self._bare.reset(bare_token)
            self._scope.reset(scope_token)

    def wrapper(self, name: str) -> Callable[[F], F]:
        """A decorator running a function (or coroutine function) inside ``scope(name)``."""

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
