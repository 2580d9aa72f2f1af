"""AReaL's session-tracing calls: ``register_task``, ``register_session``,
``trace_session_event``, ``trace_session_phase``/``atrace_session_phase`` and the
``session_context``/``trace_session`` decorators, with the task and session ids of the
current thread or asyncio task in context variables. No-ops without a session tracer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from telemetry.tracing.api import get_session_tracer
from telemetry.tracing.categories import SessionTraceEvent
from telemetry.tracing.nulls import NULL_SCOPE

__all__ = [
    "atrace_session_phase",
    "get_session_id",
    "get_task_id",
    "register_session",
    "register_task",
    "session_context",
    "set_session_id",
    "set_task_id",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]

_task_id: ContextVar[int | None] = ContextVar("rltel_task_id", default=None)
_session_id: ContextVar[int | None] = ContextVar("rltel_session_id", default=None)

_EVENTS = {
    "mark_finalized": "finalized",
    **{
        f"mark_{phase}_{edge}": f"{phase}_{edge}"
        for phase in ("generate", "reward", "toolcall")
        for edge in ("start", "end")
    },
}
"""AReaL's event methods and the :class:`SessionTraceEvent` value each records."""


def set_session_id(session_id: int | None) -> None:
    """Set the session of the current context."""
    _session_id.set(session_id)


def get_session_id() -> int | None:
    """The session of the current context."""
    return _session_id.get()


def set_task_id(task_id: int | None) -> None:
    """Set the task of the current context."""
    _task_id.set(task_id)


def get_task_id() -> int | None:
    """The task of the current context."""
    return _task_id.get()


def register_task(task_id: int) -> None:
    """Register ``task_id`` with the session tracer."""
    tracer = get_session_tracer()
    if tracer is not None:
        tracer.register_task(task_id)


def register_session(task_id: int) -> int | None:
    """A new session under ``task_id``: its id, or ``None`` without a session tracer."""
    tracer = get_session_tracer()
    return None if tracer is None else tracer.register_session(task_id)


def trace_session_event(
    method: str, session_id: int | None = None, task_id: int | None = None, **payload: Any
) -> None:
    """Record AReaL's session event ``method`` (``mark_finalized``,
    ``mark_generate_start``, ..., or ``increment_counter`` with ``name`` and ``value``) for
    ``session_id``, or for every session of ``task_id``; unknown methods are ignored."""
    tracer = get_session_tracer()
    if tracer is None:
        return
    if session_id is not None:
        sessions = [session_id]
    elif task_id is not None:
        sessions = tracer.get_session_ids(task_id)
    else:
        return
    if method == "increment_counter":
        name = payload.get("name")
        if name:
            for sid in sessions:
                tracer.increment_counter(sid, name, payload.get("value", 1))
        return
    value = _EVENTS.get(method)
    if value is None:
        return
    for sid in sessions:
        tracer.record_event(sid, SessionTraceEvent(value), **payload)


class _PhaseScope:
    """``mark_<phase>_start`` at entry and ``mark_<phase>_end`` at exit (even on error)."""

    def __init__(
        self,
        session_id: int,
        phase: str,
        start_payload: dict[str, Any] | None,
        end_payload: dict[str, Any] | None,
    ) -> None:
        self._session_id = session_id
        self._phase = phase
        self._start = start_payload or {}
        self._end = end_payload or {}

    def __enter__(self) -> _PhaseScope:
        trace_session_event(f"mark_{self._phase}_start", session_id=self._session_id, **self._start)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        trace_session_event(f"mark_{self._phase}_end", session_id=self._session_id, **self._end)
        return False

    async def __aenter__(self) -> _PhaseScope:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


def trace_session_phase(
    phase: str,
    *,
    start_payload: dict[str, Any] | None = None,
    end_payload: dict[str, Any] | None = None,
) -> Any:
    """A ``with`` scope marking ``phase`` of the current context's session (a do-nothing
    scope when the context has no session)."""
    session_id = _session_id.get()
    if session_id is None:
        return NULL_SCOPE
    return _PhaseScope(session_id, phase, start_payload, end_payload)


atrace_session_phase = trace_session_phase
"""The same scope for ``async with``."""


def _wrap(func: Callable, before: Callable[[], Any]) -> Callable:
    """``func`` (plain or coroutine function) running inside ``before()``'s scope."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            async with before():
                return await func(*args, **kwargs)

        return run_async

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        with before():
            return func(*args, **kwargs)

    return run


def _new_session() -> Any:
    task_id = _task_id.get()
    _session_id.set(register_session(task_id) if task_id is not None else None)
    return NULL_SCOPE


def session_context() -> Callable[[Callable], Callable]:
    """Decorate a function: each call registers a session under the context's task and
    makes it the context's session (``None`` without a task), as AReaL."""
    return lambda func: _wrap(func, _new_session)


def trace_session(phase: str) -> Callable[[Callable], Callable]:
    """Decorate a function: each call runs inside ``trace_session_phase(phase)``."""
    return lambda func: _wrap(func, lambda: trace_session_phase(phase))
