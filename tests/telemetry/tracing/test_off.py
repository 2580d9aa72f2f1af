"""Tracing that is not configured records nothing, writes nothing and imports no SDK trace
module; after ``reset`` it is off again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.telemetry.tracing.trace_file import read_events

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
import json, sys
from telemetry import perf_tracer, stats_tracker

# not configured: every call of AReaL's trainer and workflow is a no-op
scope = perf_tracer.trace_scope("train.rollout", args={"global_step": 0})
with scope, stats_tracker.record_timing("rollout"):
    perf_tracer.instant("i")
same = perf_tracer.trace_scope("other") is scope
assert perf_tracer.register_session(1) is None and perf_tracer.get_session_tracer() is None
perf_tracer.save(force=True)
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
# a StatsLogger whose tracing section is off (the default) starts no tracer either (its
# queue's modules load the SDK's trace encoder for the OTLP sink: not the tracer's doing)
from rltel import StatsLogger

logger = StatsLogger({"fileroot": sys.argv[1]}, sinks=[])
with stats_tracker.record_timing("step"):
    pass
logger.commit(0, 0, 0, stats_tracker.export_all(reduce_group=None))
logger.close()
recorder = [m for m in ("telemetry.tracing.recorder", "telemetry.tracing.replay")
            if m in sys.modules]
print(json.dumps({
    "same": same, "loaded": loaded, "recorder": recorder, "configured": perf_tracer.is_configured()
}))
"""


def test_unconfigured_calls_import_nothing_and_write_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"same": True, "loaded": [], "recorder": [], "configured": False}
    assert list(tmp_path.rglob("*.jsonl")) == []


def test_reset_turns_tracing_off_again(tmp_path: Path) -> None:
    from telemetry import perf_tracer, stats_tracker
    from tests.telemetry.tracing.areal_tracer import areal_tracer

    config = areal_tracer().PerfTracerConfig(
        experiment_name="exp", trial_name="trial", fileroot=str(tmp_path), enabled=True
    )
    perf_tracer.configure(config, rank=3, role="actor")
    with perf_tracer.trace_scope("kept"), stats_tracker.record_timing("kept_timing"):
        pass
    perf_tracer.reset()
    with perf_tracer.trace_scope("after_reset"), stats_tracker.record_timing("after_timing"):
        pass
    perf_tracer.save(force=True)
    (path,) = tmp_path.rglob("traces-r3.jsonl")
    assert path.parent.name == "actor"
    names = [e["name"] for e in read_events(path) if e["ph"] == "X"]
    assert names == ["timeperf/kept_timing", "kept"]  # in the order they ended
    assert json.loads(path.read_text().splitlines()[0])["args"]["name"] == "[actor] Rank 3, Process"
