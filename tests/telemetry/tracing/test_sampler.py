"""Sampling keeps the configured rate: the token bucket alone, and through a configured
tracer (whole subtrees dropped, no orphan spans), with a test clock and with the real one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from telemetry import perf_tracer
from telemetry.tracing.sampler import RateLimit


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Config:
    """rltel's tracing keys this test sets (read by attribute, as the StatsLogger's are)."""

    sample_rate: float | None
    enabled: bool = True


@pytest.fixture
def spans(tmp_path: Path) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    perf_tracer.reset()


def _configure(rate: float | None, exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    perf_tracer.configure(Config(rate), rank=0, role="test", exporter=exporter, output_dir=tmp_path)


@pytest.mark.parametrize("rate", [1.0, 10.0, 250.0])
def test_bucket_holds_one_second_then_refills_at_the_rate(rate: float) -> None:
    clock = Clock()
    limit = RateLimit(rate, clock=clock)
    burst = int(max(rate, 1))
    assert sum(limit.take() for _ in range(burst + 5)) == burst  # the first second's spans
    clock.now += 0.5  # half a second refills rate/2 tokens
    assert sum(limit.take() for _ in range(burst)) == int(rate * 0.5)
    clock.now += 60.0  # a long pause refills one second's worth, not sixty
    assert sum(limit.take() for _ in range(100 * burst)) == burst
    assert limit.kept == 2 * burst + int(rate * 0.5)


def test_children_follow_their_parent_and_never_orphan(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    _configure(4.0, spans, tmp_path)
    recorder = perf_tracer.get_tracer().recorder
    recorder.limit = RateLimit(4.0, clock=Clock())  # 4 tokens, never refilled
    for step in range(5):  # 5 parents with a child each
        parent = perf_tracer.trace_scope("parent", args={"global_step": step})
        with parent, perf_tracer.trace_scope("child"):
            pass
    perf_tracer.save()
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == ["child", "parent", "child", "parent"]
    ids = {s.context.span_id for s in finished}
    for span in finished:
        assert span.parent is None or span.parent.span_id in ids
        assert span.attributes["rltel.step"] in (0, 1)  # the child has its parent's step
    # two parents and their children take the 4 tokens; the other 3 parents find none and
    # their children are dropped with them without asking the bucket
    assert (recorder.limit.kept, recorder.limit.dropped) == (4, 3)


def test_configured_rate_with_the_real_clock(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    rate = 200.0
    _configure(rate, spans, tmp_path)
    start = time.monotonic()
    offered = 0
    while time.monotonic() - start < 0.3:
        for _ in range(10):
            with perf_tracer.trace_scope("s"):
                pass
        offered += 10
    elapsed = time.monotonic() - start
    perf_tracer.save()
    kept = len(spans.get_finished_spans())
    assert offered > rate * elapsed + rate  # offered faster than the rate
    assert rate <= kept <= rate + rate * elapsed + 1


def test_no_rate_keeps_every_span(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    _configure(None, spans, tmp_path)
    for _ in range(3000):
        with perf_tracer.trace_scope("s"):
            perf_tracer.instant("i")
    perf_tracer.save()
    assert len(spans.get_finished_spans()) == 6000


def test_rate_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sample rate"):
        RateLimit(0)
    from telemetry.model.errors import ConfigError

    with pytest.raises(ConfigError, match="sample_rate"):
        perf_tracer.configure(Config(-1.0), rank=0, output_dir=tmp_path)
    assert not perf_tracer.is_configured()
