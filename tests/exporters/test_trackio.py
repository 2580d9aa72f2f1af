"""Trackio sink: local runs read back with Trackio's own SQLite reader."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("trackio")

from exporters.base import ExportResult
from exporters.factory import BuildContext
from exporters.trackio import TrackioProcessSink, data_dir
from telemetry.config import StatsLoggerConfig, TrackioConfig
from telemetry.model.sample import Sample
from telemetry.model.snapshot import Gauge, ScalarMean, Snapshot, Step
from tests.exporters.train_steps import train_snapshot
from tests.fresh_python import run_python
from tests.trackio_log import series, trackio_run


def make_config(tmp_path, mode: str = "local", **fields) -> StatsLoggerConfig:
    return StatsLoggerConfig(
        experiment_name="exp",
        trial_name="t1",
        fileroot=str(tmp_path / "root"),
        trackio=TrackioConfig(mode=mode, **fields),
    )


def contract_config(tmp_path, stack):
    """The Trackio sink of the sink contract (tests/exporters/test_base.py), in a process of
    its own as the collector runs it."""
    return make_config(tmp_path), BuildContext(own_process=True)


SAMPLES = (
    Sample("rollout", (("prompt", "2+2?"), ("completion", "4")), (("reward", 1.0),)),
    Sample("rollout", (("prompt", "3+3?"), ("completion", "7")), (("reward", float("nan")),)),
    Sample("eval-rollout", (("prompt", "1+1?"),), (("reward", 0.5),), ("prompt",)),
)


def test_every_key_at_its_step_moe_experts_streams_and_samples(tmp_path):
    rng = np.random.default_rng(0)
    config = make_config(tmp_path, project="rltel-test")
    sink = TrackioProcessSink(config)
    expected: dict[str, dict[int, float]] = {}
    for step in (2, 3):
        snapshot, want = train_snapshot(rng, step)
        if step == 3:
            snapshot = Snapshot(snapshot.points, snapshot.step, samples=SAMPLES)
        assert sink.export(snapshot, timeout_s=30) is ExportResult.SUCCESS
        for key, value in want.items():
            expected.setdefault(key, {})[step] = value
    streams = [("rollout", 9, 0.9), ("rollout", 1, 0.1), ("eval", 0, 0.5), ("rollout", None, 0.4)]
    for stream, step, value in streams:
        snap = Snapshot(
            (ScalarMean(f"{stream}/reward", value, count=4),),
            step=None if step is None else Step(0, step, step),
            stream=stream,
        )
        assert sink.export(snap, timeout_s=30) is ExportResult.SUCCESS
    expected["rollout/reward"] = {9: 0.9, 1: 0.1, 0: 0.4}
    expected["eval/reward"] = {0: 0.5}
    sink.shutdown()
    sink.shutdown()
    assert sink.run_dir == str(tmp_path / "root" / "exp" / "t1" / "trackio")
    assert data_dir(config) == sink.run_dir
    run = trackio_run(sink.run_dir, "rltel-test", "t1")
    assert run["runs"] == ["t1"]
    found = series(run["rows"])
    tables = {key: found.pop(key) for key in ("samples/rollout", "samples/eval-rollout")}
    assert found.keys() == expected.keys()  # no __count key, every per-expert series
    for key, by_step in expected.items():
        assert found[key].keys() == by_step.keys(), key
        for step, value in by_step.items():
            if key == "ppo_actor/update/loss/avg":  # sum / count against numpy's mean
                assert found[key][step] == [pytest.approx(value, rel=1e-12)], (key, step)
            else:
                assert found[key][step] == [value], (key, step)
    ((rollout,),) = tables["samples/rollout"].values()
    assert tables["samples/rollout"].keys() == {3}
    assert rollout["_type"] == "trackio.table"
    assert rollout["_value"] == [
        {"prompt": "2+2?", "completion": "4", "reward": 1.0, "truncated": ""},
        {"prompt": "3+3?", "completion": "7", "reward": None, "truncated": ""},
    ]
    ((evaluation,),) = tables["samples/eval-rollout"].values()
    assert evaluation["_value"] == [{"prompt": "1+1?", "reward": 0.5, "truncated": "prompt"}]
    assert run["config"]["experiment_name"] == "exp"
    assert run["config"]["trackio"]["project"] == "rltel-test"


def test_skip_held_steps_logs_each_training_step_once_across_a_restart(tmp_path):
    config = make_config(tmp_path)

    def step(n: int, samples: tuple = ()) -> Snapshot:
        return Snapshot((Gauge("train/loss", 1.0 / n),), step=Step(0, n, n), samples=samples)

    first = TrackioProcessSink(config)
    for n in (1, 2):
        assert first.export(step(n, SAMPLES[:1]), timeout_s=30) is ExportResult.SUCCESS
    first.shutdown()  # a collector killed after these steps reached the run
    second = TrackioProcessSink(config)
    second.skip_held_steps()  # as the collector does with every run's sink
    for n in (1, 2, 3, 3):  # the durable queue replays steps 1 and 2; a retry repeats 3
        assert second.export(step(n, SAMPLES[:1]), timeout_s=30) is ExportResult.SUCCESS
    second.shutdown()
    found = series(trackio_run(data_dir(config), "exp", "t1")["rows"])
    assert found["train/loss"] == {n: [1.0 / n] for n in (1, 2, 3)}
    assert {n: len(rows) for n, rows in found["samples/rollout"].items()} == {1: 1, 2: 1, 3: 1}
    third = TrackioProcessSink(config)  # without skip_held_steps (a training process)
    assert third.export(step(3), timeout_s=30) is ExportResult.SUCCESS
    third.shutdown()
    found = series(trackio_run(data_dir(config), "exp", "t1")["rows"])
    assert found["train/loss"][3] == [1.0 / 3, 1.0 / 3]  # one run, resumed: logged again


def test_the_embedded_sink_stays_local_and_keeps_one_data_directory_per_process(tmp_path):
    code = f"""
import json, socket, sys
connects = []
def audit(event, args):
    if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        connects.append(str(args[1]))
sys.addaudithook(audit)
from exporters.trackio import TrackioSink
from telemetry.config import StatsLoggerConfig
from telemetry.model.snapshot import Gauge, Snapshot, Step
imported = "trackio" in sys.modules
def config(trial):
    return StatsLoggerConfig(experiment_name="exp", trial_name=trial,
        fileroot={str(tmp_path / "root")!r}, trackio={{"mode": "local"}})
sink = TrackioSink(config("a"))
result = sink.export(Snapshot((Gauge("train/x", 1.5),), step=Step(0, 4, 4))).value
try:
    TrackioSink(config("b"))
    other = None
except RuntimeError as exc:
    other = str(exc)
sink.shutdown()
from trackio import SQLiteStorage
rows = SQLiteStorage.get_logs("exp", "a")
print(json.dumps(dict(imported=imported, result=result, other=other, connects=connects,
    rows=[(row["step"], row["train/x"]) for row in rows])))
"""
    (line,) = [line for line in run_python(code).splitlines() if line.startswith("{")]
    out = json.loads(line)
    assert out["imported"] is False  # trackio only when a sink is built
    assert out["result"] == "success"
    assert out["rows"] == [[4, 1.5]]
    assert out["connects"] == []  # no space_id: nothing leaves the machine
    root = tmp_path / "root" / "exp"
    assert out["other"] == (
        f"trackio: this process's Trackio data directory is {root / 'a' / 'trackio'} (fixed "
        f"when trackio was imported), not {root / 'b' / 'trackio'}; Trackio allows one per "
        "process (use TrackioProcessSink for several)"
    )


def test_a_missing_trackio_names_the_extra(tmp_path):
    code = f"""
import sys
sys.modules["trackio"] = None  # not installed
from exporters.trackio import TrackioSink
from telemetry.config import StatsLoggerConfig
try:
    TrackioSink(StatsLoggerConfig(fileroot={str(tmp_path)!r}, trackio={{"mode": "local"}}))
except ModuleNotFoundError as exc:
    print(exc.name, exc)
"""
    assert run_python(code).strip() == (
        "trackio the Trackio sink needs trackio: pip install rltel[trackio]"
    )


def test_an_unwritable_data_directory_fails_at_construction(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RuntimeError, match="cannot create run directory"):
        TrackioProcessSink(make_config(tmp_path, dir=str(blocker / "trackio")))
