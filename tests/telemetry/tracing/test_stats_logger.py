"""A StatsLogger with ``tracing`` on configures the process's tracer for its role and rank:
embedded, the AReaL-style loop's spans land in ``<run_dir>/traces``; the ``record_timing`` key
turns their spans on and off; with an OTLP endpoint, spans reach a real trace service with the
run's identity; with ``tracing`` off, nothing is recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rltel.logger import StatsLogger
from telemetry import perf_tracer, stats_tracker
from tests.telemetry.tracing import areal_style
from tests.telemetry.tracing.areal_tracer import areal_tracer
from tests.telemetry.tracing.trace_file import check_fields, check_nested_and_ordered, read_events
from tests.telemetry.tracing.trace_receiver import TraceReceiver

STEPS = 2


def _config(root: Path, tracing: dict[str, Any], endpoint: str | None = None) -> dict[str, Any]:
    return {
        "experiment_name": "exp",
        "trial_name": "t1",
        "fileroot": str(root),
        "otlp": {"endpoint": endpoint, "timeout": 2.0},
        "tracing": tracing,
    }


def _areal_config(root: Path) -> Any:
    areal = areal_tracer()
    return areal.PerfTracerConfig(
        experiment_name="exp", trial_name="t1", fileroot=str(root / "areal"), enabled=True
    )


@pytest.mark.parametrize("record_timing", [True, False])
def test_embedded_trace_file_and_the_record_timing_key(tmp_path: Path, record_timing: bool) -> None:
    tracing = {"enabled": True, "record_timing": record_timing}
    logger = StatsLogger(_config(tmp_path, tracing), sinks=[])
    try:
        # AReaL's trainer configures perf_tracer after building its StatsLogger: it gets
        # the StatsLogger's tracer
        areal_style.train(perf_tracer, _areal_config(tmp_path), STEPS)
    finally:
        logger.close()
    assert not (tmp_path / "areal").exists()
    path = tmp_path / "exp" / "t1" / "traces" / "perf_tracer" / "trainer" / "traces-r0.jsonl"
    events = read_events(path)
    check_fields(events)
    check_nested_and_ordered(events)
    timing = [e["name"] for e in events if e.get("cat") == "timeperf"]
    assert len(timing) == (4 * STEPS if record_timing else 0)
    names = [e["name"] for e in events if e["ph"] == "X"]
    assert names.count("train.ppo_update") == STEPS
    sessions = path.parents[2] / "session_tracer" / "trainer" / "sessions-r0.jsonl"
    expected = areal_style.TASKS * areal_style.SAMPLES * STEPS
    assert len(sessions.read_text().splitlines()) == expected
    assert not perf_tracer.is_configured()


def test_tracing_off_records_nothing(tmp_path: Path) -> None:
    logger = StatsLogger(_config(tmp_path, {"enabled": False}), sinks=[])
    try:
        assert not perf_tracer.is_configured()
        with perf_tracer.trace_scope("x"), stats_tracker.record_timing("y"):
            pass
    finally:
        logger.close()
    assert list(tmp_path.rglob("*.jsonl")) == []


def test_spans_reach_a_trace_service_through_the_otlp_sink(tmp_path: Path) -> None:
    with TraceReceiver() as receiver:
        endpoint = f"127.0.0.1:{receiver.port}"
        tracing = {"enabled": True, "record_timing": True}
        logger = StatsLogger(
            _config(tmp_path, tracing, endpoint),
            otlp_options={"backoff_s": 0.01, "max_backoff_s": 0.05},
        )
        try:
            for step in range(STEPS):
                with (
                    stats_tracker.record_timing("train_step"),
                    perf_tracer.trace_scope("train.ppo_update", args={"global_step": step}),
                ):
                    perf_tracer.instant("mark", category="scheduler")
                logger.commit(0, step, step, stats_tracker.export_all(reduce_group=None))
                perf_tracer.save(step=step)
        finally:
            logger.close()
        receiver.wait_for(3 * STEPS)
        spans = receiver.spans()
    assert len(spans) == 3 * STEPS
    by_name: dict[str, list[Any]] = {}
    for resource, span in spans:
        assert resource["rltel.experiment"] == "exp" and resource["rltel.trial"] == "t1"
        assert resource["rltel.role"] == "trainer" and resource["rltel.rank"] == 0
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == ["mark", "timeperf/train_step", "train.ppo_update"]
    for timing, update, mark in zip(
        by_name["timeperf/train_step"], by_name["train.ppo_update"], by_name["mark"], strict=True
    ):
        assert update.parent_span_id == timing.span_id and mark.parent_span_id == update.span_id
        assert update.trace_id == timing.trace_id == mark.trace_id
        assert timing.start_time_unix_nano <= update.start_time_unix_nano
        assert update.end_time_unix_nano <= timing.end_time_unix_nano
    assert not (tmp_path / "exp" / "t1" / "traces").exists()  # no trace file: the collector's


def _rank_steps(rank: int, world: int, endpoint: str, root: str) -> list[str]:
    import torch.distributed as dist

    tracing = {"enabled": True, "record_timing": True}
    logger = StatsLogger(_config(Path(root), tracing, endpoint))
    try:
        for step in range(STEPS):
            with (
                stats_tracker.record_timing("train_step"),
                perf_tracer.trace_scope("train.ppo_update", args={"global_step": step}),
            ):
                pass
            stats = stats_tracker.export_all()
            logger.commit(0, step, step, stats)
        dist.barrier()  # rank 0's store outlives every rank's logger, as in a job
    finally:
        logger.close()
    return sorted(p.name for p in (Path(root) / "exp" / "t1" / "otlp-spool").iterdir())


def test_every_trainer_rank_sends_its_spans(tmp_path: Path) -> None:
    """Rank 1 logs no stats but has an OTLP sink for its spans (its own spool)."""
    from tests.distributed import run_ranks

    with TraceReceiver() as receiver:
        endpoint = f"127.0.0.1:{receiver.port}"
        spools = run_ranks(_rank_steps, 2, endpoint, str(tmp_path), timeout=120)
        receiver.wait_for(2 * 2 * STEPS)
        spans = receiver.spans()
    assert spools == [["trainer", "trainer-1"]] * 2
    ranks = sorted(resource["rltel.rank"] for resource, _ in spans)
    assert ranks == [0] * 2 * STEPS + [1] * 2 * STEPS
    for rank in (0, 1):
        names = sorted(s.name for r, s in spans if r["rltel.rank"] == rank)
        assert names == sorted(["timeperf/train_step", "train.ppo_update"] * STEPS)
