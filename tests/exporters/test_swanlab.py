"""SwanLab sink: offline runs read back with SwanLab's own backup reader."""

from __future__ import annotations

import os
import socket
import sys

import numpy as np
import pytest
import yaml

pytest.importorskip("swanlab")

from swanlab.log.backup.datastore import DataStore
from swanlab.log.backup.models import ModelsParser

from exporters.base import ExportResult
from exporters.factory import BuildContext
from exporters.swanlab import SwanlabProcessSink, SwanlabSink
from telemetry.config import StatsLoggerConfig, SwanlabConfig
from telemetry.model.snapshot import Gauge, ScalarMean, Snapshot, Step
from tests.exporters.train_steps import train_snapshot
from tests.fresh_python import run_python

CONNECTS: list = []


def _audit(event: str, args: tuple) -> None:
    if event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        CONNECTS.append(args[1])


sys.addaudithook(_audit)


def make_config(tmp_path, mode: str = "offline", **fields) -> StatsLoggerConfig:
    return StatsLoggerConfig(
        experiment_name="exp",
        trial_name="t1",
        fileroot=str(tmp_path / "root"),
        swanlab=SwanlabConfig(mode=mode, **fields),
    )


def contract_config(tmp_path, stack):
    """The SwanLab sink of the sink contract (tests/exporters/test_base.py), in a process of
    its own as the collector runs it."""
    return make_config(tmp_path), BuildContext(own_process=True)


def read_back(sink: SwanlabSink) -> tuple[object, dict[str, dict[int, float]]]:
    """The experiment record and {key: {step: value}} of the run's backup file."""
    store = DataStore()
    store.open_for_scan(os.path.join(sink.run_dir, "backup.swanlab"))
    with ModelsParser() as parser:
        for record in store:
            parser.parse_record(record)
    _, _, experiment, _, _, _, scalars, _, _ = parser.get_parsed()
    series: dict[str, dict[int, float]] = {}
    for scalar in scalars:
        series.setdefault(scalar.key, {})[scalar.step] = scalar.metric["data"]
    return experiment, series


def test_keys_steps_moe_experts_and_streams(tmp_path):
    CONNECTS.clear()
    rng = np.random.default_rng(0)
    sink = SwanlabSink(make_config(tmp_path, api_key="swan-secret-1"))
    expected: dict[str, dict[int, float]] = {}
    for step in (2, 3):
        snapshot, want = train_snapshot(rng, step)
        assert sink.export(snapshot) is ExportResult.SUCCESS
        for key, value in want.items():
            expected.setdefault(key, {})[step] = value
    streams = [("rollout", 9, 0.9), ("rollout", 1, 0.1), ("eval", 0, 0.5), ("rollout", None, 0.4)]
    for stream, step, value in streams:
        snap = Snapshot(
            (ScalarMean(f"{stream}/reward", value, count=4),),
            step=None if step is None else Step(0, step, step),
            stream=stream,
        )
        assert sink.export(snap) is ExportResult.SUCCESS
    expected["rollout/reward"] = {9: 0.9, 1: 0.1, 0: 0.4}
    expected["eval/reward"] = {0: 0.5}
    again = Snapshot((Gauge("rollout/reward", 0.95),), step=Step(0, 9, 9), stream="rollout")
    assert sink.export(again) is ExportResult.SUCCESS
    assert sink.duplicates == 1  # SwanLab keeps one value per (key, step)
    sink.shutdown()
    sink.shutdown()
    assert CONNECTS == []
    assert sink.run_dir.startswith(str(tmp_path / "root" / "exp" / "t1" / "swanlog"))
    experiment, series = read_back(sink)
    assert experiment.name == "exp_t1"
    assert series.keys() == expected.keys()
    for key, by_step in expected.items():
        assert series[key].keys() == by_step.keys(), key
        for step, value in by_step.items():
            assert series[key][step] == pytest.approx(value, rel=1e-9), (key, step)
    with open(os.path.join(sink.run_dir, "files", "config.yaml")) as f:
        config_text = f.read()
    assert "swan-secret-1" not in config_text
    assert yaml.safe_load(config_text)["experiment_name"]["value"] == "exp"


def test_a_repeated_key_at_a_step_keeps_the_first_value_and_says_so(tmp_path, caplog):
    sink = SwanlabSink(make_config(tmp_path))
    first = Snapshot((Gauge("train/a", 1.0), Gauge("train/b", 2.0)), step=Step(0, 11, 11))
    again = Snapshot((Gauge("train/a", 5.0), Gauge("train/c", 3.0)), step=Step(0, 11, 11))
    for snapshot in (first, again):
        assert sink.export(snapshot) is ExportResult.SUCCESS
    sink.shutdown()
    (record,) = [r for r in caplog.records if r.name == "exporters.swanlab.sink"]
    assert record.getMessage() == (
        "swanlab: train step 11 repeats 1 key already logged at this step (train/a); SwanLab "
        "keeps the first value of a key per step, so the repeated values are not written"
    )
    assert sink.duplicates == 1
    _, series = read_back(sink)
    assert series == {"train/a": {11: 1.0}, "train/b": {11: 2.0}, "train/c": {11: 3.0}}


def test_one_run_per_process_is_enforced(tmp_path):
    first = SwanlabSink(make_config(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="one run per process"):
            SwanlabSink(make_config(tmp_path / "other"))
    finally:
        first.shutdown()
    second = SwanlabSink(make_config(tmp_path / "other"))  # allowed once the first finished
    second.shutdown()
    assert sink_closed_export_fails(second)


def sink_closed_export_fails(sink: SwanlabSink) -> bool:
    snapshot = Snapshot((Gauge("a", 1.0),), step=Step(0, 1, 1))
    return sink.export(snapshot) is ExportResult.PERMANENT_FAILURE  # closed: never retried


def test_unwritable_logdir_fails_at_construction(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="cannot create run directory"):
        SwanlabSink(make_config(tmp_path, logdir=str(blocker / "swanlog")))


def test_disabled_never_imports_swanlab(tmp_path):
    code = (
        "import sys\n"
        "from exporters.swanlab import SwanlabSink\n"
        "from telemetry.config import StatsLoggerConfig\n"
        "from telemetry.model.snapshot import Gauge, Snapshot\n"
        f"sink = SwanlabSink(StatsLoggerConfig(fileroot={str(tmp_path / 'r')!r}))\n"
        "assert sink.export(Snapshot((Gauge('a', 1.0),))).value == 'success'\n"
        "sink.shutdown()\n"
        "print('swanlab' in sys.modules)\n"
    )
    assert run_python(code).strip() == "False"
    assert not (tmp_path / "r").exists()


def test_process_sinks_serve_two_runs_at_once(tmp_path):
    sinks = {
        trial: SwanlabProcessSink(
            StatsLoggerConfig(
                experiment_name="exp",
                trial_name=trial,
                fileroot=str(tmp_path / "root"),
                swanlab=SwanlabConfig(mode="offline"),
            )
        )
        for trial in ("a", "b")
    }
    for step in (1, 2, 3):
        for index, (trial, sink) in enumerate(sinks.items()):
            snap = Snapshot((Gauge("loss", step + 10.0 * index),), step=Step(0, step, step))
            assert sink.export(snap, timeout_s=30) is ExportResult.SUCCESS, trial
    for sink in sinks.values():
        sink.shutdown()
        sink.shutdown()
        assert sink_closed_export_fails(sink)
    for index, (trial, sink) in enumerate(sinks.items()):
        experiment, series = read_back(sink)
        assert experiment.name == f"exp_{trial}"
        assert series == {"loss": {s: s + 10.0 * index for s in (1, 2, 3)}}


def test_process_sink_reports_child_construction_errors(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RuntimeError, match="cannot create run directory"):
        SwanlabProcessSink(make_config(tmp_path, logdir=str(blocker / "swanlog")))
