"""Spans as trace events: complete events (``ph: "X"``), their span events and step
boundaries as instant events (``ph: "i"``), and one pid per process of a run. A rollout
session and its phases (category ``session``), which overlap on one thread, are nestable
async pairs (``ph: "b"``/``"e"``, ``id``: the session id), as the embedded file has them.

Times are the spans' own (``start_time_unix_nano``): microseconds since the Unix epoch,
written with all three decimals (``ts`` and ``dur`` as exact decimal text: a float would
round 1.7e15 µs to a quarter microsecond), so spans of every rank and worker line up on the
clock each process read. A pid is the CRC-32 of the process's label, the same in every part
and after a restart; ``process_sort_index`` puts trainer ranks first, in rank order.
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from collector.traces.spans import Process, SpanView
from telemetry.model import trace_names

__all__ = [
    "STEP_CATEGORY",
    "dumps",
    "metadata",
    "pid_of",
    "sort_index",
    "span_events",
    "step_event",
]

STEP_CATEGORY = "step"
SPAN_CATEGORY = "span"  # a span without a category attribute
_TIMES = ("ts", "dur")


def pid_of(process: Process) -> int:
    """The process's pid on the timeline (31 bits: Perfetto takes it as a positive int)."""
    return zlib.crc32(process.label.encode()) & 0x7FFFFFFF


def sort_index(process: Process) -> int:
    """Trainer ranks first by rank, then other roles by rank or numbered worker."""
    number = process.rank if process.rank is not None else 0
    if process.worker is not None and process.worker.isdigit():
        number = int(process.worker)
    if process.role == "trainer":
        return number
    return 1_000_000 + (zlib.crc32(process.role.encode()) % 1000) * 10_000 + number % 10_000


def _micros(ns: int) -> str:
    whole, frac = divmod(max(0, ns), 1000)
    return f"{whole}.{frac:03d}"


def _plain(attributes) -> dict[str, Any]:
    """Attributes as JSON values: a NaN or infinity as text (JSON has no such number)."""
    return {
        key: str(value) if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in attributes
    }


def _args(span: SpanView) -> dict[str, Any]:
    args = _plain(span.args)
    if span.step is not None:
        args["step"] = span.step
    args["span_id"] = span.span_id.hex()
    if span.parent_id:
        args["parent_id"] = span.parent_id.hex()
    if span.error is not None:
        args["error"] = span.error
    return args


def metadata(span: SpanView, pid: int) -> list[dict[str, Any]]:
    """The process's name and sort index, and the thread's name when the span has one."""
    process = span.process
    out = [
        _meta("process_name", pid, 0, {"name": process.label}),
        _meta("process_sort_index", pid, 0, {"sort_index": sort_index(process)}),
    ]
    if span.thread_name is not None:
        out.append(_meta("thread_name", pid, span.thread, {"name": span.thread_name}))
    return out


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def span_events(span: SpanView, pid: int) -> list[dict[str, Any]]:
    """The complete event of ``span`` (an instant event if it stands for one), and an
    instant event per span event."""
    category = span.category or SPAN_CATEGORY
    event = {
        "name": span.name,
        "cat": category,
        "ph": "X",
        "ts": Decimal6(span.start_ns),
        "dur": Decimal6(span.end_ns - span.start_ns),
        "pid": pid,
        "tid": span.thread,
        "args": _args(span),
    }
    if span.instant:
        del event["dur"]
        event.update(ph="i", s="t")
    if span.category == trace_names.SESSION_CATEGORY:  # sessions overlap on one thread
        del event["dur"]
        ident = event["args"].get("session_id", event["args"]["span_id"])
        event.update(ph="b", id=ident)
        end = {key: event[key] for key in ("name", "cat", "pid", "tid", "id")}
        out = [event, {**end, "ph": "e", "ts": Decimal6(span.end_ns)}]
    else:
        out = [event]
    for name, time_ns, attributes in span.instants:
        out.append(
            {
                "name": name,
                "cat": category,
                "ph": "i",
                "s": "t",
                "ts": Decimal6(time_ns),
                "pid": pid,
                "tid": span.thread,
                "args": _plain(attributes),
            }
        )
    return out


def step_event(step: int, time_ns: int, pid: int, tid: int) -> dict[str, Any]:
    """The instant event marking where ``step`` begins in one process."""
    return {
        "name": f"step {step}",
        "cat": STEP_CATEGORY,
        "ph": "i",
        "s": "p",
        "ts": Decimal6(time_ns),
        "pid": pid,
        "tid": tid,
        "args": {"step": step},
    }


class Decimal6(int):
    """Nanoseconds written as exact microseconds (``1234.567``) by :func:`dumps`."""


def dumps(event: dict[str, Any]) -> bytes:
    """One event as a JSON line; :class:`Decimal6` values as exact microseconds."""
    times = {key: event[key] for key in _TIMES if isinstance(event.get(key), Decimal6)}
    if not times:
        return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
    rest = {key: value for key, value in event.items() if key not in times}
    head = ",".join(f'"{key}":{_micros(value)}' for key, value in times.items())
    body = json.dumps(rest, separators=(",", ":"), ensure_ascii=False, default=str)
    return ("{" + head + ("," + body[1:] if len(body) > 2 else "}")).encode()
