"""The caller's side of span recording: a few microseconds per span.

A scope (:class:`SpanScope`) reads the clock at entry and exit, gets its ids and its parent
from a ``ContextVar`` (so scopes nest per thread and per asyncio task), asks the rate limit
whether to keep it (only when its parent was kept: children of a dropped span are dropped
with it), and at exit appends one tuple to a bounded queue; a full queue drops the span and
counts it. Everything else (attributes, the SDK span, the export) happens on
:class:`~telemetry.tracing.replay.Replayer`'s thread.
"""

from __future__ import annotations

import contextvars
import logging
import os
import random
import threading
import time
from collections import deque
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from telemetry.tracing.drops import Drops
from telemetry.tracing.replay import Record, Replayer
from telemetry.tracing.sampler import RateLimit
from telemetry.tracing.settings import TraceSettings

__all__ = ["DROPPED", "Identity", "Recorder", "SpanScope"]

logger = logging.getLogger(__name__)

Identity = tuple[int, int, Any]
"""``(trace_id, span_id, step)`` of an open span; :data:`DROPPED` for a dropped one."""

DROPPED: Identity = (0, 0, None)

_current: contextvars.ContextVar[Identity | None] = contextvars.ContextVar(
    "rltel_span", default=None
)
_thread = threading.local()
_bits = random.getrandbits


def _thread_ids() -> tuple[int, str]:
    ids = getattr(_thread, "ids", None)
    if ids is None:
        ids = _thread.ids = (threading.get_native_id(), threading.current_thread().name)
    return ids


def _forget_thread_ids() -> None:
    """A forked child's thread has a native id of its own."""
    global _thread
    _thread = threading.local()


os.register_at_fork(after_in_child=_forget_thread_ids)


def _record(
    name: str,
    category: str,
    args: dict[str, Any] | None,
    start_ns: int,
    end_ns: int,
    me: Identity,
    parent: Identity | None,
    exception: str | None = None,
    instant: bool = False,
) -> Record:
    """The queued form of an ended span, on the thread that ran it."""
    tid, thread_name = _thread_ids()
    parent_id = parent[1] if parent else 0
    args = dict(args) if args else None  # the caller may reuse its dict
    return (
        name,
        category,
        args,
        start_ns,
        end_ns,
        me[0],
        me[1],
        parent_id,
        me[2],
        tid,
        thread_name,
        exception,
        instant,
    )


class SpanScope:
    """One span around a ``with`` or ``async with`` block (see the module doc); an
    exception's type is kept as ``args.exception`` (status error) and not suppressed."""

    __slots__ = ("_args", "_category", "_name", "_parent", "_rec", "_self", "_start", "_token")

    def __init__(self, rec: Recorder, name: str, category: str, args: dict | None) -> None:
        self._rec = rec
        self._name = name
        self._category = category
        self._args = args
        self._token: Any = None

    def __enter__(self) -> SpanScope:
        parent = _current.get()
        step = self._args.get("global_step") if self._args else None
        self._self = self._rec.open(parent, step)
        self._parent = parent
        self._token = _current.set(self._self)
        self._start = time.time_ns()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        end = time.time_ns()
        if self._token is None:
            return False
        try:
            _current.reset(self._token)
        except ValueError:  # left in another context (an async generator closed elsewhere)
            _current.set(self._parent)
        self._token = None
        me = self._self
        if me[1]:
            exception = None if exc_type is None else exc_type.__name__
            self._rec.submit(
                _record(
                    self._name,
                    self._category,
                    self._args,
                    self._start,
                    end,
                    me,
                    self._parent,
                    exception,
                )
            )
        return False

    async def __aenter__(self) -> SpanScope:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)


class Recorder:
    """One process's span recording: ids, rate limit, bounded queue, the SDK replayer.

    Args:
        settings: the resolved settings (rank, role, rate, queue bound).
        exporter: where ended spans go (the Chrome trace file, or the OTLP sink's).
    """

    def __init__(self, settings: TraceSettings, exporter: SpanExporter) -> None:
        rate = settings.sample_rate
        self.limit = RateLimit(rate) if rate is not None else None
        self._queue: deque[Record] = deque()
        self._max = settings.max_queue
        self._batch = min(512, settings.max_queue)
        self.replayer = Replayer(settings, exporter, self._queue)
        self.exporter = exporter
        self.drops = Drops(
            logger,
            f"perf_tracer: {self._max} spans queued; dropping spans",
            "perf_tracer: queue has room again (%d spans dropped)",
        )

    def open(self, parent: Identity | None, step: Any = None) -> Identity:
        """The identity of a span opening under ``parent`` (``None``: a root): dropped
        under a dropped parent, else kept if the rate limit allows; ``step`` defaults to
        the parent's."""
        if parent is not None:
            if not parent[1]:
                return DROPPED
            if step is None:
                step = parent[2]
        if self.limit is not None and not self.limit.take():
            return DROPPED
        return (parent[0] if parent else _bits(128), _bits(64) or 1, step)

    def submit(self, record: Record) -> None:
        """Queue an ended span for the replayer, or drop and count it when the queue is
        full (logged once per change between dropping and not)."""
        queue = self._queue
        if len(queue) >= self._max:
            self.drops.drop()
            return
        self.drops.kept()
        queue.append(record)
        if len(queue) >= self._batch:
            wake = self.replayer.wake
            if not wake.is_set():
                wake.set()

    def scope(self, name: str, category: str, args: dict[str, Any] | None) -> SpanScope:
        """A span scope named ``name`` (not yet entered)."""
        return SpanScope(self, name, category, args)

    def instant(self, name: str, category: str, args: dict[str, Any] | None) -> None:
        """An instant event: a zero-length span under the current scope."""
        parent = _current.get()
        me = self.open(parent, args.get("global_step") if args else None)
        if me[1]:
            now = time.time_ns()
            self.submit(_record(name, category, args, now, now, me, parent, None, True))

    def span(
        self,
        name: str,
        category: str,
        args: dict[str, Any],
        start_ns: int,
        end_ns: int,
        me: Identity,
        parent: Identity | None = None,
    ) -> None:
        """An ended span with explicit times and identity (from :meth:`open`), outside the
        caller's context: the session tracer's."""
        if me[1]:
            self.submit(_record(name, category, args, start_ns, end_ns, me, parent))

    def flush(self) -> bool:
        """Replay and export every ended span now."""
        return self.replayer.flush()

    def close(self) -> None:
        """Export what is queued and stop (idempotent)."""
        self.replayer.close()

    def health(self) -> dict[str, int]:
        """Spans dropped for a full queue, replay failures and the rate limit's counts."""
        out = {
            "spans_dropped": self.drops.count + self.replayer.processor.drops.count,
            "replay_failures": self.replayer.failures,
        }
        if self.limit is not None:
            out |= {"sampled_kept": self.limit.kept, "sampled_dropped": self.limit.dropped}
        return out
