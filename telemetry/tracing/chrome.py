"""The embedded sink of spans: AReaL's per-rank Chrome trace file (``traces.jsonl``).

One JSON trace event per line, as AReaL's ``PerfTracer.save`` writes: ``process_name`` and
``process_sort_index`` metadata for the process and ``thread_name`` for each thread first
seen, then a complete event (``ph: "X"``, ``ts`` and ``dur`` in microseconds) per span, or
an instant event (``ph: "i"``, ``s: "t"``) for an instant's zero-length span, and a
nestable async pair (``ph: "b"``/``"e"``, ``id``: the session id) for a rollout session and
each of its phases, which overlap on one thread; ``args`` are the call's args plus ``rank``
and ``role``. Unlike AReaL's, ``ts`` is Unix time in
microseconds (AReaL's counts from its tracer's creation), so every rank's file shares one
clock, and ``dur`` is the end's microsecond minus the start's, so a child never ends after
its parent. It runs on the ``BatchSpanProcessor``'s thread, never the caller's.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from telemetry.model import trace_names

__all__ = ["ChromeTraceFile", "trace_events"]

logger = logging.getLogger(__name__)


def _args(attributes: Any, rank: int, role: str | None) -> dict[str, Any]:
    prefix = trace_names.ARGS_PREFIX
    args = {
        key[len(prefix) :]: value for key, value in attributes.items() if key.startswith(prefix)
    }
    args.setdefault("rank", rank)
    if role is not None:
        args.setdefault("role", role)
    return args


def trace_events(span: ReadableSpan, pid: int, rank: int, role: str | None) -> list[dict[str, Any]]:
    """The trace events of one ended span: a complete event, an instant event for an
    instant's span, or for a rollout session's span (and its phases') a nestable async
    pair ``b``/``e`` with the session id as ``id`` (sessions of one thread overlap)."""
    attributes = span.attributes or {}
    start_us = (span.start_time or 0) // 1000
    end_us = (span.end_time or span.start_time or 0) // 1000
    category = attributes.get(trace_names.CATEGORY, "misc")
    tid = attributes.get(trace_names.THREAD_ID, 0)
    args = _args(attributes, rank, role)
    if category == trace_names.SESSION_CATEGORY:
        ident = args.get("session_id", 0)
        head = {"name": span.name, "ph": "b", "ts": start_us, "pid": pid, "tid": tid}
        begin = {**head, "cat": category, "id": ident, "args": args}
        end = {**head, "ph": "e", "ts": end_us, "cat": category, "id": ident}
        return [begin, end]
    if attributes.get(trace_names.INSTANT):
        event = {"name": span.name, "ph": "i", "ts": start_us, "pid": pid, "tid": tid}
        return [{**event, "cat": category, "args": args, "s": "t"}]
    event = {"name": span.name, "ph": "X", "ts": start_us, "dur": end_us - start_us}
    return [{**event, "pid": pid, "tid": tid, "cat": category, "args": args}]


class ChromeTraceFile(SpanExporter):
    """Appends ended spans to ``path`` as AReaL's trace events, one JSON object a line.

    Args:
        path: the per-rank file (its folder is made on the first export).
        rank: written as each event's ``args.rank`` and the process's sort index.
        role: written as ``args.role`` and in the process name, when given.

    A failing write drops that batch, counts its spans (``failed_spans``) and logs once
    per change between failing and writing.
    """

    def __init__(self, path: Path, *, rank: int, role: str | None) -> None:
        self.path = Path(path)
        self.rank = rank
        self.role = role
        self.written_spans = 0
        self.failed_spans = 0
        self._pids: set[int] = set()
        self._tids: set[tuple[int, int]] = set()
        self._failing = False
        self._closed = False

    def _metadata(self, pid: int, span: ReadableSpan) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if pid not in self._pids:
            self._pids.add(pid)
            label = f"Rank {self.rank}, Process"
            if self.role is not None:
                label = f"[{self.role}] {label}"
            out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
            out.append(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": pid,
                    "args": {"sort_index": self.rank},
                }
            )
        attributes = span.attributes or {}
        tid = attributes.get(trace_names.THREAD_ID, 0)
        if (pid, tid) not in self._tids:
            self._tids.add((pid, tid))
            name = attributes.get(trace_names.THREAD_NAME, str(tid))
            out.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
            )
        return out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append ``spans`` (in the order they ended) with any new metadata first."""
        if self._closed:
            return SpanExportResult.FAILURE
        pid = os.getpid()
        events: list[dict[str, Any]] = []
        for span in spans:
            events.extend(self._metadata(pid, span))
            events.extend(trace_events(span, pid, self.rank, self.role))
        lines = "".join(json.dumps(e, ensure_ascii=False, default=str) + "\n" for e in events)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(lines)
        except OSError as exc:
            self.failed_spans += len(spans)
            if not self._failing:
                self._failing = True
                logger.warning("perf_tracer: cannot write %s (%s); spans dropped", self.path, exc)
            return SpanExportResult.FAILURE
        if self._failing:
            self._failing = False
            logger.warning(
                "perf_tracer: writing %s again (%d spans dropped so far)",
                self.path,
                self.failed_spans,
            )
        self.written_spans += len(spans)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Every export is written when it returns: nothing to flush."""
        return True

    def shutdown(self) -> None:
        """Refuse later exports (idempotent)."""
        self._closed = True
