"""The sink contract, run against every sink (OTLP against a real receiver): export,
idempotent shutdown, closed -> PERMANENT_FAILURE, failures answered (never raised) and
counted by the fan-out."""

from __future__ import annotations

import io
import threading
from contextlib import ExitStack

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


def _otlp(tmp_path, stack: ExitStack) -> Sink:
    from exporters.otlp.sink import OtlpSink
    from exporters.otlp.spool import Spool
    from tests.telemetry.otlp_receiver import Receiver

    receiver = stack.enter_context(Receiver())
    return OtlpSink(receiver.endpoint, spool=Spool(tmp_path / "spool", 10**6), timeout_s=5.0)


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
NETWORK_SINKS = {"otlp": _otlp}  # these get an ExitStack for the server they send to


@pytest.mark.parametrize("kind", [*SINKS, *NETWORK_SINKS])
def test_every_sink_keeps_the_contract(kind, tmp_path):
    with ExitStack() as stack:
        if kind in NETWORK_SINKS:
            sink = NETWORK_SINKS[kind](tmp_path, stack)
        else:
            sink = SINKS[kind](tmp_path)
        _keeps_the_contract(sink)


def _keeps_the_contract(sink: Sink) -> None:
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


def test_the_fan_out_counts_an_unreachable_otlp_sink_and_keeps_the_others():
    """Without a spool an OTLP sink that cannot deliver is retried, then counted: the
    snapshot as failed by its queue, its points as dropped by the sink."""
    from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
    from tests.telemetry.otlp_receiver import Receiver

    down = Receiver()  # never started
    good = InMemorySink()
    otlp = OtlpSink(down.endpoint, timeout_s=2.0, backoff_s=0.01, max_backoff_s=0.02)
    fanout = FanOut([good, otlp])
    try:
        fanout.export(SNAPSHOT)
        assert fanout.force_flush(10.0)  # the queue gave up on it: nothing left to flush
        stats = fanout.stats()
        assert stats["otlp"].failed == 1 and stats["otlp"].retried == 3
        assert stats["memory"].exported == 1 and good.snapshots == [SNAPSHOT]
        health = otlp.health()
        assert health["points_dropped"] == len(SNAPSHOT.points) + HEALTH_POINTS
        assert health["retries"] == 4 and health["points_exported"] == 0
    finally:
        fanout.shutdown(5.0)


def test_in_memory_sink_keeps_snapshots_in_order():
    sink = InMemorySink()
    first, second = Snapshot(()), Snapshot((), stream="rollout")
    assert sink.export(first) is ExportResult.SUCCESS
    sink.export(second)
    assert sink.snapshots == [first, second]
