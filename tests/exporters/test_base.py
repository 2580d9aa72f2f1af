"""The sink contract, run against every sink of the registry (built through its factory,
senders against a real peer): export, idempotent shutdown, closed -> PERMANENT_FAILURE,
failures answered (never raised) and counted by the fan-out.

Each sink's test module (``tests/exporters/test_<name>.py``, or ``<name>/test_sink.py``)
defines ``contract_config(tmp_path, stack) -> (config, BuildContext)``: a config that turns
the sink on, writing under ``tmp_path`` (a peer it sends to started in ``stack``).
"""

from __future__ import annotations

import importlib
import threading
from contextlib import ExitStack

import pytest

from exporters import registry
from exporters.base import ExportResult, InMemorySink, RunSink, Sink
from exporters.fanout import FanOut
from telemetry.model.snapshot import Gauge, Snapshot, Step

SNAPSHOT = Snapshot((Gauge("loss", 0.5, 2),), Step(0, 0, 3))


def contract_config(name: str):
    """The ``contract_config`` of sink ``name``'s test module."""
    for module in (f"tests.exporters.test_{name}", f"tests.exporters.{name}.test_sink"):
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module or module.startswith(f"{exc.name}."):
                continue
            raise
        if hasattr(found, "contract_config"):
            return found.contract_config
    pytest.fail(f"sink {name}: tests/exporters/test_{name}.py defines no contract_config")


@pytest.mark.parametrize("factory", registry.factories(), ids=lambda factory: factory.name)
def test_every_sink_keeps_the_contract(factory, tmp_path):
    with ExitStack() as stack:
        config, context = contract_config(factory.name)(tmp_path, stack)
        assert [f.name for f in registry.enabled(config) if f is factory] == [factory.name]
        _keeps_the_contract(factory.create(config, context))


def test_the_in_memory_double_keeps_the_contract():
    _keeps_the_contract(InMemorySink())


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
