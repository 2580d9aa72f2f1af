"""The per-rank trace file's times are the spans' own microseconds: ``ts`` is the start's
microsecond and ``ts + dur`` the end's, so a child ending in its parent's last microsecond
never ends after it, whatever nanoseconds lie below (fixed times where the two roundings of
a duration differ)."""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from telemetry.model import trace_names
from telemetry.tracing.chrome import ChromeTraceFile
from tests.telemetry.tracing.trace_file import check_fields, check_nested_and_ordered, read_events

# (name, start ns, end ns), children inside "step": (end - start) // 1000 is one short of
# end // 1000 - start // 1000 for "step" and "update", not for "forward" and "backward".
PARENT = ("step", 1_000_999, 3_000_000)
CHILDREN = (
    ("forward", 1_500_000, 2_000_000),
    ("backward", 2_000_000, 2_999_999),
    ("update", 2_999_001, 3_000_000),
)


def test_durations_are_the_ends_microsecond_minus_the_starts(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ChromeTraceFile(path, rank=0, role="actor")))
    tracer = provider.get_tracer("test")
    attributes = {trace_names.CATEGORY: "compute", trace_names.THREAD_ID: 7}
    name, start, end = PARENT
    parent = tracer.start_span(name, attributes=attributes, start_time=start)
    context = trace.set_span_in_context(parent)
    for child_name, child_start, child_end in CHILDREN:
        child = tracer.start_span(
            child_name, context, attributes=attributes, start_time=child_start
        )
        child.end(end_time=child_end)
    parent.end(end_time=end)
    provider.shutdown()

    events = read_events(path)
    check_fields(events)
    complete = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X"}
    expected = {n: (s // 1000, e // 1000) for n, s, e in (*CHILDREN, PARENT)}
    assert complete == expected
    check_nested_and_ordered(events)  # "update" ends in "step"'s last microsecond, not after
