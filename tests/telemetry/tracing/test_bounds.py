"""Spans never wait on the caller's thread: a full queue drops and counts, logs once per
change, and a stalled exporter costs spans, not the training loop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from telemetry import perf_tracer


@dataclass
class Config:
    max_queue: int
    enabled: bool = True


class Stalled(SpanExporter):
    """A downstream that takes nothing until released (what a slow disk or network does)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        assert self.release.wait(60), "never released"
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


@pytest.fixture
def stalled(tmp_path: Path) -> Iterator[Stalled]:
    exporter = Stalled()
    perf_tracer.configure(Config(8), rank=0, exporter=exporter, output_dir=tmp_path)
    yield exporter
    exporter.release.set()
    perf_tracer.reset()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_full_caller_queue_drops_and_counts(stalled: Stalled, caplog) -> None:
    recorder = perf_tracer.get_tracer().recorder
    with caplog.at_level(logging.WARNING), recorder.replayer._lock:  # replay held up
        for _ in range(100):
            with perf_tracer.trace_scope("s"):
                pass
        assert recorder.drops.count == 92  # 8 queued
    assert _warnings(caplog) == ["perf_tracer: 8 spans queued; dropping spans"]
    stalled.release.set()
    perf_tracer.save()
    with caplog.at_level(logging.WARNING), perf_tracer.trace_scope("after"):
        pass
    assert "perf_tracer: queue has room again (92 spans dropped)" in _warnings(caplog)
    perf_tracer.save()
    assert [s.name for s in stalled.spans] == ["s"] * 8 + ["after"]


def test_stalled_exporter_drops_on_the_replay_side(stalled: Stalled, caplog) -> None:
    recorder = perf_tracer.get_tracer().recorder
    with caplog.at_level(logging.WARNING):
        for _ in range(200):
            with perf_tracer.trace_scope("s"):
                pass
            recorder.replayer.replay()  # keep the caller's queue short
    dropped = perf_tracer.get_tracer().health()["spans_dropped"]
    assert 200 - 16 <= dropped <= 200 - 8  # 8 waiting + at most one batch in the export
    # once per change: dropping, and at most once more after the export took its one batch
    warned = _warnings(caplog)
    dropping = "perf_tracer: 8 spans waiting for export; dropping"
    assert warned[0] == dropping and len(warned) <= 3, warned  # caught up, then maybe again
    assert warned[2:] in ([], [dropping]) and all("caught up" in w for w in warned[1:2])
    stalled.release.set()
    perf_tracer.save()
    assert len(stalled.spans) == 200 - dropped


def test_a_scope_left_in_another_context_raises_nothing(tmp_path: Path) -> None:
    """An ``async with`` scope entered in one task and left in another (an async generator
    finalized elsewhere) still records its span and never raises into the caller."""
    import asyncio
    import contextvars

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    perf_tracer.configure(Config(64), rank=0, exporter=exporter, output_dir=tmp_path)
    try:
        scope = perf_tracer.atrace_scope("moved")
        asyncio.run(scope.__aenter__())  # entered in one context ...
        contextvars.Context().run(asyncio.run, scope.__aexit__(None, None, None))  # left in another
        with perf_tracer.trace_scope("next"):
            pass
        perf_tracer.save()
    finally:
        perf_tracer.reset()
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["moved", "next"]


class Unprintable:
    """An arg whose text form fails (a user's object): its span cannot be built."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_span_that_cannot_be_built_is_counted_and_logged_once(tmp_path: Path, caplog) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    perf_tracer.configure(Config(64), rank=0, exporter=exporter, output_dir=tmp_path)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                with perf_tracer.trace_scope("bad", args={"x": Unprintable()}):
                    pass
            with perf_tracer.trace_scope("good"):
                pass
            perf_tracer.save()
        health = perf_tracer.get_tracer().health()
    finally:
        perf_tracer.reset()
    assert [s.name for s in exporter.get_finished_spans()] == ["good"]
    assert health["replay_failures"] == 3
    warned = _warnings(caplog)
    assert len(warned) == 2 and "not recorded" in warned[0]
    assert warned[1] == "perf_tracer: spans recorded again (3 failed)"
