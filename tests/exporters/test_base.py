"""The sink contract, run against every sink: export, idempotent shutdown, closed ->
PERMANENT_FAILURE, failures answered (never raised) and counted by the fan-out."""

from __future__ import annotations

import io
import threading

import pytest

from exporters.base import ExportResult, InMemorySink, RunSink, Sink
from exporters.fanout import FanOut
from telemetry.config import (
    PrometheusConfig,
    StatsLoggerConfig,
    SwanlabConfig,
    TensorBoardConfig,
    WandBConfig,
)
from telemetry.model.snapshot import Gauge, Snapshot, Step

SNAPSHOT = Snapshot((Gauge("loss", 0.5, 2),), Step(0, 0, 3))


def _config(tmp_path, **sections) -> StatsLoggerConfig:
    return StatsLoggerConfig(
        experiment_name="e", trial_name="t", fileroot=str(tmp_path), **sections
    )


def _console(tmp_path) -> Sink:
    from exporters.console import ConsoleSink

    return ConsoleSink(stream=io.StringIO())


def _prometheus(tmp_path) -> Sink:
    from exporters.prometheus import PrometheusSink

    return PrometheusSink(PrometheusConfig(enabled=True, port=0))


def _tensorboard(tmp_path) -> Sink:
    pytest.importorskip("tensorboard")
    from exporters.tensorboard import TensorBoardSink

    return TensorBoardSink(_config(tmp_path, tensorboard=TensorBoardConfig(path=str(tmp_path))))


def _wandb(tmp_path) -> Sink:
    pytest.importorskip("wandb")
    from exporters.wandb import WandbSink

    return WandbSink(_config(tmp_path, wandb=WandBConfig(mode="offline")))


def _swanlab(tmp_path) -> Sink:
    pytest.importorskip("swanlab")
    from exporters.swanlab import SwanlabProcessSink

    return SwanlabProcessSink(_config(tmp_path, swanlab=SwanlabConfig(mode="offline")))


SINKS = {
    "memory": lambda tmp_path: InMemorySink(),
    "console": _console,
    "prometheus": _prometheus,
    "tensorboard": _tensorboard,
    "wandb": _wandb,
    "swanlab": _swanlab,
}


@pytest.mark.parametrize("kind", SINKS)
def test_every_sink_keeps_the_contract(kind, tmp_path):
    sink = SINKS[kind](tmp_path)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert sink.force_flush() is True
    finally:
        sink.shutdown()
    sink.shutdown()  # idempotent
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE  # closed: never retry


class FailingRun(RunSink):
    """A run sink whose writes and finish fail."""

    name = "failing"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.finished = 0
        self.writes = 0

    def _active(self) -> bool:
        return True

    def _write(self, snapshot: Snapshot) -> None:
        self.writes += 1
        raise OSError("disk gone")

    def _finish(self) -> None:
        self.finished += 1
        raise OSError("disk gone")


def test_run_sink_answers_failure_and_finishes_once_never_raising(caplog):
    sink = FailingRun()
    assert sink.export(SNAPSHOT) is ExportResult.FAILURE
    assert "failing: writing the train snapshot failed" in caplog.text
    sink.shutdown()
    sink.shutdown()
    assert sink.finished == 1 and sink.writes == 1
    assert "failing: finishing failed" in caplog.text
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE
    assert sink.writes == 1  # a closed sink does not write


def test_the_fan_out_counts_a_failing_sink_and_keeps_the_others():
    good, bad = InMemorySink(), FailingRun()
    fanout = FanOut([good, bad])
    try:
        fanout.export(SNAPSHOT)
        assert fanout.force_flush(10.0)
        stats = fanout.stats()
        assert stats["failing"].failed >= 1 and stats["memory"].exported == 1
        assert good.snapshots == [SNAPSHOT]
    finally:
        fanout.shutdown(5.0)


def test_in_memory_sink_keeps_snapshots_in_order():
    sink = InMemorySink()
    first, second = Snapshot(()), Snapshot((), stream="rollout")
    assert sink.export(first) is ExportResult.SUCCESS
    sink.export(second)
    assert sink.snapshots == [first, second]
