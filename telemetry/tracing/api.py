"""The process's tracer and AReaL's module-level calls on it: ``configure``, ``trace_scope``,
``atrace_scope``, ``instant``, ``trace_perf``, ``save``, ``reset``, ``get_tracer``.

Until :func:`configure` runs (and after :func:`reset`), every call is a no-op: scopes are one
shared do-nothing object and nothing of OpenTelemetry's SDK is imported.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from telemetry.tracing.categories import CategoryLike
from telemetry.tracing.nulls import NULL_SCOPE
from telemetry.tracing.settings import resolve

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from telemetry.tracing.sessions import SessionTracer
    from telemetry.tracing.tracer import PerfTracer

__all__ = [
    "atrace_scope",
    "configure",
    "current",
    "get_session_tracer",
    "get_tracer",
    "instant",
    "is_configured",
    "reset",
    "save",
    "trace_perf",
    "trace_scope",
]

logger = logging.getLogger(__name__)

_tracer: PerfTracer | None = None
_shared = False  # configured by the StatsLogger: a later configure() call gets it
_lock = threading.Lock()
_atexit_registered = False


def current() -> PerfTracer | None:
    """The configured tracer, or ``None`` (AReaL's ``GLOBAL_TRACER``)."""
    return _tracer


def _close_at_exit() -> None:
    tracer = _tracer
    if tracer is not None:
        try:
            tracer.close()
        except Exception:
            logger.exception("perf_tracer: flush at exit failed")


def configure(
    config: Any,
    *,
    rank: int,
    role: str | None = None,
    exporter: SpanExporter | None = None,
    output_dir: str | Path | None = None,
    resource: tuple[tuple[str, Any], ...] = (),
    shared: bool = False,
) -> PerfTracer:
    """Configure this process's tracer from AReaL's ``PerfTracerConfig`` or rltel's
    ``TracingConfig`` (see :func:`telemetry.tracing.settings.resolve`).

    A tracer configured with ``shared`` (the StatsLogger's, from ``stats_logger.tracing``)
    is what a later call returns (logged), so that AReaL's own ``configure`` call after
    the StatsLogger's keeps working and records into the StatsLogger's tracer.

    Args:
        config: the tracer config (read by attribute).
        rank: this process's rank.
        role: this process's role (``master``, ``actor``, ``rollout``, ...).
        exporter: where spans go (the OTLP sink's span exporter); default: the Chrome
            trace file.
        output_dir: the folder of the trace and session files (default: AReaL's).
        resource: more resource attributes of the spans (the StatsLogger's run identity).
        shared: later calls get this tracer instead of an error.

    Raises:
        RuntimeError: already configured (call :func:`reset` first), as AReaL.
        ConfigError: a bad value in ``config``, naming its key.
    """
    global _tracer, _shared, _atexit_registered
    settings = resolve(config, rank=rank, role=role, output_dir=output_dir, resource=resource)
    with _lock:
        if _tracer is not None and _shared:
            logger.info("perf_tracer: configured by the StatsLogger (stats_logger.tracing): kept")
            return _tracer
        if _tracer is not None:
            raise RuntimeError(
                "PerfTracer has already been configured. Call perf_tracer.reset() "
                "before configuring again."
            )
        from telemetry.tracing.tracer import PerfTracer

        _tracer = PerfTracer(settings, exporter)
        _shared = shared
        if not _atexit_registered:
            atexit.register(_close_at_exit)
            _atexit_registered = True
    logger.info(
        "perf_tracer: enabled=%s sessions=%s rank=%s role=%s",
        settings.enabled,
        settings.session_path is not None,
        rank,
        role,
    )
    return _tracer


def is_configured() -> bool:
    """Whether :func:`configure` ran (and no :func:`reset` since)."""
    return _tracer is not None


def get_tracer() -> PerfTracer:
    """The configured tracer.

    Raises:
        RuntimeError: not configured.
    """
    tracer = _tracer
    if tracer is None:
        raise RuntimeError("PerfTracer is not configured. Call perf_tracer.configure(...) first.")
    return tracer


def get_session_tracer() -> SessionTracer | None:
    """The configured tracer's session tracer, if any."""
    tracer = _tracer
    return None if tracer is None else tracer.session_tracer


def reset() -> None:
    """Close the tracer (sessions written, spans exported) so that :func:`configure` may
    run again."""
    global _tracer, _shared
    with _lock:
        tracer, _tracer, _shared = _tracer, None, False
    if tracer is not None:
        tracer.close()


def trace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> Any:
    """A span around a ``with`` block (a do-nothing scope when not configured)."""
    tracer = _tracer
    if tracer is None:
        return NULL_SCOPE
    return tracer.trace_scope(
        name,
        category=category,
        enable_profiler=enable_profiler,
        profiler_args=profiler_args,
        args=args,
    )


def atrace_scope(
    name: str,
    *,
    category: CategoryLike = None,
    enable_profiler: bool = False,
    profiler_args: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
) -> Any:
    """A span around an ``async with`` block (a do-nothing scope when not configured)."""
    tracer = _tracer
    if tracer is None:
        return NULL_SCOPE
    return tracer.atrace_scope(
        name,
        category=category,
        enable_profiler=enable_profiler,
        profiler_args=profiler_args,
        args=args,
    )


def instant(
    name: str, *, category: CategoryLike = None, args: dict[str, Any] | None = None
) -> None:
    """An instant event (nothing when not configured)."""
    tracer = _tracer
    if tracer is not None:
        tracer.instant(name, category=category, args=args)


def save(*, step: int | None = None, force: bool = False) -> None:
    """Export the ended spans (see :meth:`PerfTracer.save`); nothing when not configured."""
    tracer = _tracer
    if tracer is not None:
        tracer.save(step=step, force=force)


def trace_perf(name: str, *, category: CategoryLike = None) -> Callable[[Callable], Callable]:
    """Decorate a function or coroutine function: each call runs inside ``trace_scope(name)``."""

    def decorator(func: Callable) -> Callable:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with atrace_scope(name, category=category):
                    return await func(*args, **kwargs)

            return run_async

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with trace_scope(name, category=category):
                return func(*args, **kwargs)

        return run

    return decorator
