"""Spans made by the stock OpenTelemetry SDK as real OTLP trace requests, and checks of a
Chrome trace event file against the trace event format and the merge's promises."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from telemetry.model import names, trace_names

PHASES = ("rollout", "reward", "train")


class Requests(SpanExporter):
    """Keeps every batch it is given as the encoded request a sender would send."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.requests.append(encode_spans(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def provider(exporter: SpanExporter, role: str, rank: int, **resource) -> TracerProvider:
    """One process's SDK provider whose resource names the run ``exp``/``t1``."""
    attributes = {
        names.EXPERIMENT: "exp",
        names.TRIAL: "t1",
        names.ROLE: role,
        names.RANK: rank,
        **resource,
    }
    made = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    made.add_span_processor(SimpleSpanProcessor(exporter))
    return made


def record_steps(made: TracerProvider, steps: range, thread: int = 7) -> int:
    """A step span per step with each phase nested in it (one phase with an event);
    returns the spans made."""
    tracer = made.get_tracer("test")
    n = 0
    for step in steps:
        attrs = {trace_names.STEP: step, trace_names.THREAD_ID: thread}
        with tracer.start_as_current_span("step", attributes=attrs):
            for phase in PHASES:
                with tracer.start_as_current_span(
                    phase, attributes={**attrs, trace_names.CATEGORY: "compute"}
                ) as span:
                    if phase == "reward":
                        span.add_event("scored", {"n": 4})
                n += 1
        n += 1
    return n


REQUIRED = {
    "X": ("ts", "dur"),
    "i": ("ts", "s"),
    "b": ("ts", "id", "cat"),
    "e": ("ts", "id", "cat"),
    "M": ("args",),
}


def load(path: Path) -> dict:
    """The document, its numbers exact (``Decimal``)."""
    return json.loads(path.read_text(), parse_float=Decimal)


def check_format(doc: dict) -> list[dict]:
    """Assert the trace event format's required fields; return the events."""
    events = doc["traceEvents"]
    assert isinstance(events, list)
    for event in events:
        assert isinstance(event["name"], str) and event["name"], event
        assert event["ph"] in REQUIRED, event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int), event
        for key in REQUIRED[event["ph"]]:
            assert key in event, (key, event)
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] > 0, event
        if event["ph"] == "i":
            assert event["s"] in ("g", "p", "t"), event
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name")
    return events


def check_nested_ordered(events: list[dict]) -> None:
    """Each thread's complete events are in start order and properly nested."""
    stacks: dict[tuple[int, int], list[tuple[Decimal, Decimal]]] = {}
    last: dict[tuple[int, int], Decimal] = {}
    for event in events:
        if event["ph"] != "X":
            continue
        start, end = event["ts"], event["ts"] + event["dur"]
        thread = (event["pid"], event["tid"])
        assert start >= last.get(thread, start), f"out of order: {event}"
        last[thread] = start
        stack = stacks.setdefault(thread, [])
        while stack and stack[-1][1] <= start:
            stack.pop()
        if stack:
            assert end <= stack[-1][1], f"overlaps its enclosing span: {event}"
        stack.append((start, end))


def processes(events: list[dict]) -> dict[int, str]:
    """pid -> process name."""
    return {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def check_ranks_and_workers(events: list[dict], spans: int) -> list[dict]:
    """The timeline holds trainer ranks 0 and 1 and rollout workers 0 and 1, and each of its
    ``spans`` complete events once; those events."""
    assert sorted(processes(events).values()) == [
        "rollout worker 0",
        "rollout worker 1",
        "trainer rank 0",
        "trainer rank 1",
    ]
    complete = [e for e in events if e["ph"] == "X"]
    ids = [e["args"]["span_id"] for e in complete]
    assert len(ids) == len(set(ids)) == spans  # every span once
    return complete


def spans_of(requests: Sequence[ExportTraceServiceRequest]) -> list:
    """Every span of ``requests``, in order."""
    return [
        span
        for request in requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
