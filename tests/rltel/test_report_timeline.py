"""`rltel report`'s timeline from a run's merged trace (the collector's, from real OTLP
requests made by the stock SDK) and from the embedded tracer's per-rank files: every rank
and worker a row, the chosen steps, the slowest rank marked, timeline.png in the page."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from opentelemetry import trace

pytest.importorskip("matplotlib")
pytest.importorskip("tensorboard")

from collector.traces import TraceMerge
from collector.traces.config import TracesConfig
from rltel.report import Filters, build_report, load_runs
from rltel.report.timeline import draw_timeline, read_timeline
from telemetry import perf_tracer
from telemetry.model import names, trace_names
from tests.collector.trace_checks import Requests, provider
from tests.rltel.test_report import write_run

PROCESSES = (
    ("trainer", 0, {}),
    ("trainer", 1, {}),
    ("rollout", 0, {names.WORKER_ID: "0"}),
    ("rollout", 1, {names.WORKER_ID: "1"}),
)
ROWS = ["trainer rank 0", "trainer rank 1", "rollout worker 0", "rollout worker 1"]
T0 = 1_800_000_000 * 10**9
STEP_NS = 10**9


def slow_rank(step: int) -> int:
    return step % 2  # rank 0 is slow on even steps, rank 1 on odd ones


def record(made: Requests, steps: range) -> None:
    """Each process: a step span, generate then train nested in it, at chosen times; the
    slow rank's train takes 0.6 s instead of 0.3 s."""
    for role, rank, extra in PROCESSES:
        tracer = provider(made, role, rank, **extra).get_tracer("t")
        for step in steps:
            base = T0 + step * STEP_NS
            attrs = {trace_names.STEP: step, trace_names.THREAD_ID: 1}
            train = 600 if role == "trainer" and rank == slow_rank(step) else 300
            root = tracer.start_span("step", attributes=attrs, start_time=base)
            context = trace.set_span_in_context(root)
            gen = tracer.start_span("generate", context, attributes=attrs, start_time=base)
            gen.end(end_time=base + 200 * 10**6)
            tr = tracer.start_span("train", context, attributes=attrs, start_time=base + 2 * 10**8)
            tr.end(end_time=base + (200 + train) * 10**6)
            root.end(end_time=base + (200 + train + 10) * 10**6)


@pytest.fixture
def traced_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "exp" / "t1"
    made = Requests()
    record(made, range(5))
    merge = TraceMerge(TracesConfig(rotate_steps=2), lambda e, t: tmp_path / e / t)
    for request in made.requests:
        merge.consume(request)
    merge.shutdown()
    write_run(run_dir / "tb", 5, {"timeperf/train_step": lambda s: 1.0})
    return run_dir


def test_the_last_steps_every_process_a_row_the_slowest_rank_named(traced_run: Path):
    timeline = read_timeline(traced_run)
    assert list(timeline.rows) == ROWS
    assert timeline.steps == (2, 3, 4)  # the last three, across rotated parts
    assert timeline.slowest == {step: slow_rank(step) for step in (2, 3, 4)}
    drawn = {(b.row, b.name, b.step) for b in timeline.bars}
    assert drawn == {
        (row, name, step)
        for row in range(4)
        for name in ("step", "generate", "train")
        for step in (2, 3, 4)
    }
    depth = {b.name: b.depth for b in timeline.bars}
    assert depth["step"] == 0 and depth["generate"] == depth["train"] == 1
    train = [b for b in timeline.bars if b.name == "train" and b.row == 1 and b.step == 3]
    assert train[0].length_s == pytest.approx(0.6)
    assert timeline.step_starts[3] - timeline.step_starts[2] == pytest.approx(1.0)


def test_since_and_until_choose_the_steps(traced_run: Path):
    timeline = read_timeline(traced_run, Filters(since=0, until=1))
    assert timeline.steps == (0, 1) and {b.step for b in timeline.bars} == {0, 1}
    assert timeline.slowest == {0: 0, 1: 1}


def test_the_figure_shows_every_rank_and_marks_the_slowest(traced_run: Path):
    drawn = draw_timeline(load_runs([traced_run]))
    (ax,) = drawn.figure.get_axes()
    assert [t.get_text() for t in ax.get_yticklabels()] == ROWS
    assert "step 4: trainer rank 0" in ax.get_title()
    markers = [line for line in ax.get_lines() if line.get_marker() == "<"]
    assert sorted(int(m.get_ydata()[0]) for m in markers) == [0, 0, 1]  # rows of 2, 4 and 3


def test_report_page_embeds_timeline_png(traced_run: Path, tmp_path: Path):
    out = tmp_path / "out"
    index = build_report(load_runs([traced_run]), out)
    png = out / "timeline.png"
    assert png.stat().st_size > 10_000
    page = index.read_text()
    assert "<section id='timeline'>" in page
    assert base64.b64encode(png.read_bytes()).decode() in page
    data = json.loads((out / "timeline.json").read_text())
    assert data["figure"] == "timeline"


def test_no_trace_no_timeline(tmp_path: Path):
    run_dir = tmp_path / "exp" / "t1"
    write_run(run_dir / "tb", 3, {"timeperf/train_step": lambda s: 1.0})
    assert read_timeline(run_dir) is None
    assert draw_timeline(load_runs([run_dir])).figure is None
    out = tmp_path / "out"
    build_report(load_runs([run_dir]), out)
    assert not (out / "timeline.png").exists()
    assert "<section id='timeline'>" not in (out / "index.html").read_text()


def test_embedded_per_rank_trace_files(tmp_path: Path):
    """The per-rank files of rltel's perf_tracer (AReaL's format, no collector): a row per
    rank, AReaL's global_step args choose the steps, the slower rank is marked."""
    run_dir = tmp_path / "exp" / "t1"
    for rank in range(2):
        perf_tracer.configure(
            SimpleNamespace(enabled=True), rank=rank, role="trainer", output_dir=run_dir / "traces"
        )
        try:
            for step in range(4):
                with (
                    perf_tracer.trace_scope("train_step", args={"global_step": step}),
                    perf_tracer.trace_scope("forward"),
                ):
                    time.sleep(0.2 * rank)  # rank 1 is the slow one
            perf_tracer.save(force=True)
        finally:
            perf_tracer.reset()
    timeline = read_timeline(run_dir)
    assert timeline.rows == ("[trainer] Rank 0, Process", "[trainer] Rank 1, Process")
    assert timeline.steps == (1, 2, 3) and timeline.slowest == {1: 1, 2: 1, 3: 1}
    drawn = sorted((b.row, b.name, b.depth) for b in timeline.bars)
    spans = (("train_step", 0), ("forward", 1))
    assert drawn == sorted((r, n, d) for r in (0, 1) for n, d in spans for _ in range(3))
