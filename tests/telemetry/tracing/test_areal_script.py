"""An AReaL-style training loop runs on rltel's ``perf_tracer`` with only its import changed:
the per-rank Chrome trace file is valid, nested and ordered, and holds what AReaL's own
tracer writes for the same program (names, categories, arg names, order), plus rltel's
``record_timing`` and session spans; the sessions file has AReaL's records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from telemetry import perf_tracer
from tests.telemetry.tracing import areal_style
from tests.telemetry.tracing.areal_tracer import areal_tracer
from tests.telemetry.tracing.trace_file import (
    check_fields,
    check_nested_and_ordered,
    read_events,
    structure,
)

STEPS = 2
RLTEL_ONLY = frozenset({"timeperf", "session"})


def _config(root: Path, threshold: int = 4) -> Any:
    areal = areal_tracer()
    return areal.PerfTracerConfig(
        experiment_name="exp",
        trial_name="trial",
        fileroot=str(root),
        enabled=True,
        session_tracer=areal.SessionTracerConfig(enabled=True, flush_threshold=threshold),
    )


def _files(root: Path) -> tuple[Path, Path]:
    traces = list(root.rglob("perf_tracer/master/traces-r0.jsonl"))
    sessions = list(root.rglob("session_tracer/master/sessions-r0.jsonl"))
    assert len(traces) == 1 and len(sessions) == 1, sorted(root.rglob("*"))
    return traces[0], sessions[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """The same program traced by AReaL's tracer and by rltel's."""
    out = {}
    for name, module in (("areal", areal_tracer().perf_tracer), ("rltel", perf_tracer)):
        root = tmp_path_factory.mktemp(name)
        areal_style.train(module, _config(root), STEPS)
        out[name] = _files(root)
    return out


def test_rltel_trace_file_is_valid_nested_and_ordered(runs: dict) -> None:
    events = read_events(runs["rltel"][0])
    check_fields(events)
    assert check_nested_and_ordered(events) >= 3  # timeperf > train.ppo_update > ... > minibatch
    process = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert [e["args"]["name"] for e in process] == ["[master] Rank 0, Process"]
    for event in events:
        if event["ph"] != "M" and event["ph"] != "e":
            assert event["args"]["rank"] == 0 and event["args"]["role"] == "master", event
    rollouts = [e for e in events if e["name"] == "train.rollout"]
    assert [e["args"]["global_step"] for e in rollouts] == list(range(STEPS))
    failed = [e for e in events if e["name"] == "train.weight_sync"]
    assert [e["args"].get("exception") for e in failed] == ["TimeoutError"] * STEPS
    assert {e["cat"] for e in failed} == {"comm"}  # "communication" named as AReaL does


def test_same_events_as_areal(runs: dict) -> None:
    areal_events = read_events(runs["areal"][0])
    rltel_events = read_events(runs["rltel"][0])
    assert structure(areal_events)  # AReaL wrote its events
    assert structure(rltel_events, skip=RLTEL_ONLY) == structure(areal_events)
    meta = {(e["name"], tuple(e["args"])) for e in areal_events if e["ph"] == "M"}
    assert meta == {(e["name"], tuple(e["args"])) for e in rltel_events if e["ph"] == "M"}


def test_rltel_adds_record_timing_and_session_spans(runs: dict) -> None:
    events = read_events(runs["rltel"][0])
    timing = [e["name"] for e in events if e.get("cat") == "timeperf"]
    expected = ["rollout", "recompute_logp", "train_step", "update_weights"] * STEPS
    assert timing == [f"timeperf/{name}" for name in expected]
    begins = [e for e in events if e["ph"] == "b"]
    sessions = areal_style.TASKS * areal_style.SAMPLES * STEPS
    assert sum(e["name"] == "session" for e in begins) == sessions
    for phase in ("session.generate", "session.reward"):
        assert sum(e["name"] == phase for e in begins) == sessions
    assert sum(e["ph"] == "e" for e in events) == len(begins)


def _sessions(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(records, key=lambda r: r["session_id"])


def _shape(record: dict[str, Any]) -> tuple:
    phases = record.get("phases", {})
    return (
        tuple(sorted(record)),
        record["task_id"],
        record["session_id"],
        record["status"],
        record.get("reason"),
        tuple(sorted((name, len(spans)) for name, spans in phases.items())),
    )


def test_sessions_file_as_areal(runs: dict) -> None:
    areal_records = _sessions(runs["areal"][1])
    rltel_records = _sessions(runs["rltel"][1])
    assert len(areal_records) == areal_style.TASKS * areal_style.SAMPLES * STEPS
    assert [_shape(r) for r in rltel_records] == [_shape(r) for r in areal_records]
    for record in rltel_records:
        assert record["submit_ts"] <= record["phases"]["generate"][0]["start_ts"]
        assert record["generate_s"] >= 0 and record["total_s"] >= record["generate_s"]
