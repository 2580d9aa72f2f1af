"""A W&B offline run resumed by a second sink (a restarted collector) that replays steps the
first part already holds: every step once over the run's parts, ``_step`` = ``global_step``,
read back with W&B's own reader."""

from __future__ import annotations

import glob
import os
from collections import Counter

import pytest

from tests.wandb_log import inspect_wandb

pytest.importorskip("wandb")

from exporters.base import ExportResult
from exporters.wandb import WandbSink
from telemetry.model.names import CLOSED_METRIC, STEP_METRIC
from telemetry.model.snapshot import Gauge, Histogram, Snapshot, Step

from .test_wandb import make_config


def step_snapshot(step: int) -> Snapshot:
    """A train snapshot at ``step`` with a plain key, the ``rltel/step`` gauge a trainer
    export carries and a user key whose name ends in ``/step``."""
    points = (
        Gauge("train/loss", step * 10.0),
        Gauge(STEP_METRIC, float(step)),
        Gauge("ledger/step", float(step)),
    )
    return Snapshot(points, step=Step(0, step, step), stream="train")


def rows_of_run(run_dir_root: str) -> list[dict]:
    """The history rows of every offline part under ``run_dir_root/wandb``, in part order."""
    parts = sorted(glob.glob(os.path.join(run_dir_root, "wandb", "offline-run-*", "*.wandb")))
    return [
        record["history"]["item"]
        for part in parts
        for record in inspect_wandb(part)
        if record["type"] == "history"
    ]


def test_resumed_run_skips_held_steps_including_keys_named_step(tmp_path):
    config = make_config(tmp_path)
    first = WandbSink(config)
    for step in range(1, 6):
        assert first.export(step_snapshot(step)) is ExportResult.SUCCESS
    first.shutdown()

    second = WandbSink(config)  # the restarted collector resumes the run by its id
    second.skip_held_steps()
    for step in range(3, 9):  # 3..5 are a replay of what the first part holds
        assert second.export(step_snapshot(step)) is ExportResult.SUCCESS
    second.shutdown()

    rows = rows_of_run(str(config.run_dir))
    assert Counter(int(row["_step"]) for row in rows) == Counter(range(1, 9))
    assert all(row["_step"] == row["global_step"] for row in rows), rows
    for key in ("train/loss", STEP_METRIC, "ledger/step"):
        steps = Counter(int(row["_step"]) for row in rows if key in row)
        assert steps == Counter(range(1, 9)), (key, steps)
    values = {int(row["_step"]): row["train/loss"] for row in rows}
    assert values == {step: step * 10.0 for step in range(1, 9)}


def test_the_trainers_closed_marker_adds_no_row(tmp_path):
    """What a collector's W&B sink gets at a trainer's close: ``rltel/step`` and
    ``rltel/closed`` at the last step, whose row is committed, with the OTLP sink's own
    health riding along, keys the last step's row may not have had (the reliability ledger
    found them in a row ``_step`` 41 for ``global_step`` 40)."""
    config = make_config(tmp_path)
    sink = WandbSink(config)
    sink.skip_held_steps()  # as the collector builds it
    for step in range(1, 4):
        assert sink.export(step_snapshot(step)) is ExportResult.SUCCESS
    latency = Histogram("rltel/otlp/export_latency", 2, 0.02, 0.005, 0.015)
    marker = (Gauge(STEP_METRIC, 3.0), Gauge(CLOSED_METRIC, 1.0), latency)
    assert sink.export(Snapshot(marker, step=Step(0, 3, 3))) is ExportResult.SUCCESS
    sink.shutdown()
    rows = rows_of_run(str(config.run_dir))
    assert [(row["_step"], row["global_step"]) for row in rows] == [(1, 1), (2, 2), (3, 3)]
