"""collector.traces: real OTLP trace requests (made by the stock SDK) into one merged
Chrome trace file per run, rotated, resumed; the span duration windows."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collector.config import from_dict
from collector.traces import CURRENT, TraceMerge, part_name
from collector.traces.chrome_file import ChromeTraceFile
from collector.traces.config import TracesConfig
from collector.traces.durations import METRIC
from collector.traces.metrics import TraceMetrics
from collector.traces.spans import read_spans
from collector.traces.timeline import RunTimeline
from exporters.prometheus.families import declared
from telemetry.model import names, trace_names
from telemetry.model.snapshot import Step
from tests.collector.trace_checks import (
    PHASES,
    Requests,
    check_format,
    check_nested_ordered,
    check_ranks_and_workers,
    load,
    processes,
    provider,
    record_steps,
    spans_of,
)


def _span(request):
    return request.resource_spans[0].scope_spans[0].spans[0]


def merge_of(tmp_path: Path, **config) -> TraceMerge:
    return TraceMerge(TracesConfig(**config), lambda e, t: tmp_path / e / t)


def merge_all(tmp_path: Path, requests: Sequence, **config) -> None:
    """A trace merge (``config`` as in :func:`merge_of`) takes ``requests`` in order, then
    shuts down."""
    merge = merge_of(tmp_path, **config)
    for request in requests:
        merge.consume(request)
    merge.shutdown()


def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "exp" / "t1"


def test_two_ranks_and_two_workers_merge_into_one_file_valid_after_every_request(tmp_path):
    made = Requests()
    counts = {}
    for role, rank, extra in (
        ("trainer", 0, {}),
        ("trainer", 1, {}),
        ("rollout", 0, {names.WORKER_ID: "0"}),
        ("rollout", 1, {names.WORKER_ID: "1"}),
    ):
        counts[role, rank] = record_steps(provider(made, role, rank, **extra), range(3))
    merge = merge_of(tmp_path)
    for request in made.requests:  # one span a request: children before their parents
        merge.consume(request)
        if (run_dir(tmp_path) / CURRENT).exists():
            check_format(load(run_dir(tmp_path) / CURRENT))  # whole after every write
    merge.shutdown()
    events = check_format(load(run_dir(tmp_path) / CURRENT))
    check_nested_ordered(events)
    complete = check_ranks_and_workers(events, sum(counts.values()))
    for pid in processes(events):
        mine = [e for e in complete if e["pid"] == pid]
        assert len(mine) == 3 * (1 + len(PHASES))
        steps = [e for e in events if e["ph"] == "i" and e["cat"] == "step" and e["pid"] == pid]
        assert [e["args"]["step"] for e in steps] == [0, 1, 2]
        first = {e["args"]["step"]: e["ts"] for e in mine if e["name"] == "step"}
        assert {e["args"]["step"]: e["ts"] for e in steps} == first
    scored = [e for e in events if e["name"] == "scored"]
    assert len(scored) == 12 and all(e["ph"] == "i" and e["args"] == {"n": 4} for e in scored)
    assert merge.stats().runs["exp_t1"].orphans == 0


def test_clocks_are_the_spans_own(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(1))
    merge_all(tmp_path, made.requests)
    sent = {
        span.span_id.hex(): (span.start_time_unix_nano, span.end_time_unix_nano)
        for span in spans_of(made.requests)
    }
    events = [e for e in load(run_dir(tmp_path) / CURRENT)["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(sent)
    for event in events:
        start, end = sent[event["args"]["span_id"]]
        assert event["ts"] * 1000 == start and (event["ts"] + event["dur"]) * 1000 == end


@pytest.mark.parametrize("rotate", [1, 2, 5])
def test_rotated_every_n_steps_each_part_whole_and_named(tmp_path, rotate):
    made = Requests()
    total = record_steps(provider(made, "trainer", 0), range(6))
    merge_all(tmp_path, made.requests, rotate_steps=rotate)
    parts = sorted(p.name for p in run_dir(tmp_path).glob("trace*.json"))
    finished = [part_name(first, rotate) for first in range(0, 6, rotate)][:-1]
    assert parts == sorted([*finished, CURRENT])
    seen = 0
    for name in parts:
        events = check_format(load(run_dir(tmp_path) / name))
        check_nested_ordered(events)
        assert list(processes(events).values()) == ["trainer rank 0"]  # each part names it
        steps = {e["args"]["step"] for e in events if e["ph"] == "X"}
        first = (5 // rotate) * rotate if name == CURRENT else int(name.split("-")[1])
        assert steps == set(range(first, min(first + rotate, 6)))
        seen += sum(1 for e in events if e["ph"] == "X")
    assert seen == total


def test_a_restarted_collector_appends_and_a_torn_file_is_set_aside(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(2))
    merge_all(tmp_path, made.requests)
    before = load(run_dir(tmp_path) / CURRENT)["traceEvents"]
    again = Requests()
    record_steps(provider(again, "trainer", 0), range(2, 4))
    merge_all(tmp_path, again.requests)
    events = check_format(load(run_dir(tmp_path) / CURRENT))
    check_nested_ordered(events)
    assert events[: len(before)] == before
    assert sorted({e["args"]["step"] for e in events if e["ph"] == "X"}) == [0, 1, 2, 3]

    path = run_dir(tmp_path) / CURRENT
    torn = path.read_bytes()[:-7]
    path.write_bytes(torn)  # killed mid-write
    merge_all(tmp_path, again.requests)
    aside = list(run_dir(tmp_path).glob("trace.unfinished-*.json"))
    assert len(aside) == 1 and aside[0].read_bytes() == torn
    assert len([e for e in load(path)["traceEvents"] if e["ph"] == "X"]) == 8


def test_a_span_whose_root_never_comes_is_written_after_hold_s(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(2))
    by_trace = {}
    for request in made.requests:
        span = _span(request)
        if span.parent_span_id:
            by_trace.setdefault(span.trace_id, request)
    children = list(by_trace.values())  # a child of step 0's trace, one of step 1's
    now = [0.0]
    file = ChromeTraceFile(run_dir(tmp_path), 100, "exp_t1")
    timeline = RunTimeline(file, hold_s=5.0, max_pending=100, clock=lambda: now[0])
    timeline.add([s for s in read_spans(children[0])])
    assert timeline.stats().pending == 1 and not (run_dir(tmp_path) / CURRENT).exists()
    now[0] = 4.9
    timeline.add([s for s in read_spans(children[1])])
    assert timeline.stats().pending == 2
    now[0] = 5.0
    timeline.add([])
    stats = timeline.stats()
    assert (stats.pending, stats.orphans, stats.spans) == (1, 1, 1)  # the first waited 5 s
    timeline.flush()
    assert timeline.stats().orphans == 2
    assert len([e for e in load(run_dir(tmp_path) / CURRENT)["traceEvents"] if e["ph"] == "X"]) == 2


def test_pending_spans_are_bounded(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(3))
    children = [r for r in made.requests if _span(r).parent_span_id]
    file = ChromeTraceFile(run_dir(tmp_path), 100, "exp_t1")
    timeline = RunTimeline(file, hold_s=1e9, max_pending=3, clock=lambda: 0.0)
    for request in children:
        timeline.add(list(read_spans(request)))
        assert timeline.stats().pending <= 3
    assert timeline.stats().orphans == len(children) - timeline.stats().pending > 0


def test_duration_windows_match_the_spans(tmp_path):
    """Every request's windows to the shared sinks; the run's sinks get what arrived since
    the last time, once per step of the run (never twice at one step), nothing lost."""
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(2))
    record_steps(provider(made, "rollout", 0, **{names.WORKER_ID: "3"}), range(1))
    shared, figures, handed = [], [], []
    run_step = [None]

    def deliver(snapshot, at):
        shared.append(snapshot)
        handed.append(at)
        figure = at(run_step[0])
        if figure is not None:
            figures.append(figure)
        assert at(run_step[0]) is None  # a step's figures are handed out once

    merge = TraceMerge(
        TracesConfig(duration_buckets=(1e-6, 1.0)), lambda e, t: tmp_path / e / t, deliver
    )
    for n, request in enumerate(made.requests):
        run_step[0] = None if n < 2 else Step(0, n // 5, n // 5)  # no step yet, then some
        merge.consume(request)
    merge.shutdown()
    last = handed[-1](Step(0, 99, 99))  # what came after the run's last step
    figures += [last] if last is not None else []
    assert [f.step.global_step for f in figures] == sorted({f.step.global_step for f in figures})

    def totals(snapshots, role_of) -> dict:
        out: dict[tuple[str, str], list[int]] = {}
        for snapshot in snapshots:
            assert snapshot.resource_value(names.EXPERIMENT) == "exp"
            for point in snapshot.points:
                assert point.metric == METRIC and point.unit == "s"
                assert point.count == sum(point.bucket_counts) and point.bounds == (1e-6, 1.0)
                assert 0 < point.min <= point.max < 1.0 and point.bucket_counts[2] == 0
                key = (role_of(snapshot, point), dict(point.attributes)["phase"])
                total = out.setdefault(key, [0, 0])
                total[0] += point.count
                total[1] += point.bucket_counts[0]
        return out

    expected = {("trainer", p): [2, 0] for p in (*PHASES, "step")}
    expected.update({("rollout", p): [1, 0] for p in (*PHASES, "step")})
    assert totals(shared, lambda s, p: s.resource_value(names.ROLE)) == expected
    assert totals(figures, lambda s, p: dict(p.attributes)["role"]) == expected


def test_spans_without_a_run_or_with_an_unusable_run_name_are_counted(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0, **{names.TRIAL: "a/b"}), range(1))

    def run_dir_of(experiment, trial):
        return from_dict({}).sinks.logger_config(experiment, trial).run_dir

    delivered = []
    merge = TraceMerge(TracesConfig(), run_dir_of, lambda s, at: delivered.append(s))
    for request in made.requests:
        merge.consume(request)
    merge.shutdown()
    stats = merge.stats()
    assert stats.spans == stats.rejected == 4 and stats.runs == {} and delivered == []


def test_non_finite_attributes_stay_json(tmp_path):
    made = Requests()
    tracer = provider(made, "trainer", 0).get_tracer("t")
    with tracer.start_as_current_span("s", attributes={"rltel.args.loss": float("nan")}):
        pass
    merge = merge_of(tmp_path)
    merge.consume(made.requests[0])
    merge.shutdown()
    (event,) = [
        e
        for e in json.loads((run_dir(tmp_path) / CURRENT).read_text())["traceEvents"]
        if e["ph"] == "X"
    ]
    assert event["args"]["loss"] == "nan"


def test_a_replay_after_a_restart_writes_no_span_twice(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(2))
    merge_all(tmp_path, made.requests[:6])
    merge_all(tmp_path, made.requests)  # the durable queue hands everything on again, then more
    events = check_format(load(run_dir(tmp_path) / CURRENT))
    ids = [e["args"]["span_id"] for e in events if e["ph"] == "X"]
    assert len(ids) == len(set(ids)) == len(made.requests)


def test_flush_is_true_only_when_no_span_waits_for_its_root(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(1))
    merge = merge_of(tmp_path)
    assert merge.flush()
    merge.consume(made.requests[0])  # a phase: its step span comes last
    assert not merge.flush()
    for request in made.requests[1:]:
        merge.consume(request)
    assert merge.flush()
    merge.shutdown()


def test_rollout_sessions_are_async_pairs_beside_nested_spans(tmp_path):
    made = Requests()
    tracer = provider(made, "rollout", 0, **{names.WORKER_ID: "0"}).get_tracer("t")
    session = {trace_names.CATEGORY: trace_names.SESSION_CATEGORY, trace_names.THREAD_ID: 1}
    a = tracer.start_span("session", attributes={**session, "rltel.args.session_id": 1})
    b = tracer.start_span("session", attributes={**session, "rltel.args.session_id": 2})
    with tracer.start_as_current_span("generate", attributes={trace_names.THREAD_ID: 1}):
        pass
    a.end()
    b.end()
    merge_all(tmp_path, made.requests)
    events = check_format(load(run_dir(tmp_path) / CURRENT))
    check_nested_ordered(events)
    pairs = sorted((e["id"], e["ph"]) for e in events if e["name"] == "session")
    assert pairs == [(1, "b"), (1, "e"), (2, "b"), (2, "e")]
    assert [e["ph"] for e in events if e["name"] == "generate"] == ["X"]


def test_a_quiet_runs_orphans_are_written_when_other_spans_arrive_or_at_a_flush(tmp_path):
    made, other = Requests(), Requests()
    record_steps(provider(made, "trainer", 0), range(1))
    record_steps(provider(other, "trainer", 0, **{names.TRIAL: "t2"}), range(1))
    merge = TraceMerge(TracesConfig(hold_s=0.5), lambda e, t: tmp_path / e / t)
    merge.consume(made.requests[0])  # a phase; its step span never comes
    assert not merge.flush() and not (run_dir(tmp_path) / CURRENT).exists()
    time.sleep(0.6)  # past hold_s (time passing, not a synchronisation)
    merge.consume(other.requests[0])  # another run's spans: the waits are checked
    runs = merge.stats().runs
    assert (runs["exp_t1"].orphans, runs["exp_t1"].spans, runs["exp_t2"].pending) == (1, 1, 1)
    assert (run_dir(tmp_path) / CURRENT).exists() and not merge.flush()
    time.sleep(0.6)
    assert merge.flush()  # t2's wait is over: written at the flush
    assert merge.stats().runs["exp_t2"].orphans == 1
    merge.shutdown()


def test_the_merge_counters_as_prometheus_families(tmp_path):
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(3))
    merge = merge_of(tmp_path, rotate_steps=1)
    for request in made.requests[1:]:
        merge.consume(request)
    merge.consume(made.requests[0])  # step 0's first phase, after its root and 2 steps
    registry = CollectorRegistry()
    metrics = TraceMetrics(merge)
    registry.register(metrics)
    samples = {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
        if not s.name.endswith("_created")
    }
    run = (("run", "exp_t1"),)
    assert samples == {
        ("rltel_collector_trace_spans_received_total", ()): 12,
        ("rltel_collector_trace_spans_rejected_total", ()): 0,
        ("rltel_collector_trace_spans_written_total", run): 12,
        ("rltel_collector_trace_spans_orphaned_total", run): 0,
        ("rltel_collector_trace_spans_late_total", run): 1,  # into step 2's part
        ("rltel_collector_trace_spans_failed_total", run): 0,
        ("rltel_collector_trace_parts_rotated_total", run): 2,
        ("rltel_collector_trace_spans_pending", run): 0,
    }
    assert {name.removesuffix("_total") for name, _ in samples} == {
        name
        for name in declared(metrics)
        if "forward" not in name  # no forward endpoint set
    }
    merge.shutdown()
