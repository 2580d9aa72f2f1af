"""The OTLP sink behind its QueuedSink against the real rltel collector on 127.0.0.1: the
spool is the queue's overflow, replayed in order, every point accounted for."""

from __future__ import annotations

import time

import pytest

from collector.config import from_dict
from collector.pipeline import Pipeline
from collector.server import CollectorServer
from exporters.base import ExportResult, InMemorySink
from exporters.factory import BuildContext
from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
from exporters.otlp.spool import Spool
from exporters.queued import QueuedSink
from telemetry.config import OtlpConfig, StatsLoggerConfig
from telemetry.model.snapshot import ScalarMean, Snapshot, Step
from tests.distributed import free_port

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 2.0}
USER = 3  # user points per snapshot
WIRE = USER + HEALTH_POINTS
STEPS = 60


def contract_config(tmp_path, stack):
    """The OTLP sink of the sink contract (tests/exporters/test_base.py), sending to a real
    OTLP receiver."""
    from tests.telemetry.otlp_receiver import Receiver

    receiver = stack.enter_context(Receiver())
    otlp = OtlpConfig(endpoint=receiver.endpoint, timeout=5.0)
    return StatsLoggerConfig(fileroot=str(tmp_path), otlp=otlp), BuildContext()


def snapshot(step: int) -> Snapshot:
    points = tuple(ScalarMean(f"g/{i}", float(step * 10 + i), count=1) for i in range(USER))
    return Snapshot(points, Step(0, step, step), (("rltel.role", "trainer"),), 10 + step)


class Collector:
    """The rltel collector on a fixed port, with an in-memory sink; startable later."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.sink = InMemorySink()
        self.server: CollectorServer | None = None

    def start(self) -> None:
        config = from_dict({"receiver": {"port": self.port}})
        self.server = CollectorServer(config, Pipeline([self.sink], None, config.limits))
        self.server.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(5)
            self.server = None

    def received(self) -> list[tuple[int, tuple[float, ...]]]:
        """(step, user values) of every snapshot the collector's sink got, in order."""
        assert self.server is not None and self.server.pipeline.force_flush(5)
        return [
            (s.step.global_step, tuple(p.value for p in s.points if p.metric.startswith("g/")))
            for s in self.sink.snapshots
        ]


@pytest.fixture
def collector():
    running = Collector()
    yield running
    running.stop()


def expected(steps: range) -> list[tuple[int, tuple[float, ...]]]:
    return [(step, tuple(float(step * 10 + i) for i in range(USER))) for step in steps]


def test_full_queue_overflows_into_the_spool_and_replays_in_order(collector, tmp_path):
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    sink = OtlpSink(collector.endpoint, spool=spool, queue_size=4, **FAST)
    queued = QueuedSink.of(sink)
    depths = []
    try:
        for step in range(STEPS):  # the collector is down: the queue fills, then spills
            room = time.monotonic() + 30  # paced by the queue's room, not the clock: a
            while queued.depth() >= 4 and time.monotonic() < room:  # loaded machine's
                time.sleep(0.001)  # worker spills late (a burst drops: the next test)
            assert queued.submit(snapshot(step))
            depths.append(queued.depth())
        deadline = time.monotonic() + 30  # generous: a loaded machine spills slowly
        while sink.health()["spool_points"] < STEPS * WIRE and time.monotonic() < deadline:
            time.sleep(0.01)
        health = sink.health()
        assert health["spool_points"] == health["points_spooled"] == STEPS * WIRE
        assert health["points_dropped"] == health["points_exported"] == 0
        assert max(depths) <= 4 and queued.stats().dropped == 0
        assert queued.stats().degraded

        collector.start()  # back: the spool replays, oldest first
        assert queued.force_flush(20.0)  # answered once the spool is delivered
        for step in range(STEPS, STEPS + 5):  # later snapshots follow the backlog
            assert queued.submit(snapshot(step))
            # one at a time: a queue half full spills, however healthy the collector
            assert queued.force_flush(10.0)
    finally:
        queued.shutdown(5.0)
    assert collector.received() == expected(range(STEPS + 5))
    health = sink.health()
    assert health["points_exported"] == (STEPS + 5) * WIRE
    assert health["requests_exported"] == STEPS + 5
    assert health["points_spooled"] == STEPS * WIRE  # the later ones went straight through
    assert health["spool_points"] == health["points_dropped"] == health["points_failed"] == 0
    assert len(spool) == 0 and not list((tmp_path / "spool").glob("*.seg"))
    stats = queued.stats()
    assert stats.dropped == stats.failed == 0 and not stats.degraded


def test_a_burst_beyond_the_queue_is_counted_to_the_point(collector, tmp_path):
    """Submitting faster than the worker can spill drops snapshots at the queue, each
    counted: delivered + dropped is exactly what was submitted, and the rest keeps order."""
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    sink = OtlpSink(collector.endpoint, spool=spool, queue_size=2, **FAST)
    queued = QueuedSink.of(sink)
    accepted = [step for step in range(200) if queued.submit(snapshot(step))]
    collector.start()
    try:
        assert queued.force_flush(30.0)
    finally:
        queued.shutdown(5.0)
    lost = 200 - len(accepted)
    assert queued.stats().dropped == lost
    assert collector.received() == expected(accepted)
    health = sink.health()
    assert health["points_exported"] == len(accepted) * WIRE
    assert health["points_dropped"] == lost * WIRE
    assert health["spool_points"] == 0


def test_endpoint_down_at_close_spools_everything_for_the_next_run(collector, tmp_path):
    spool_dir = tmp_path / "spool"
    sink = OtlpSink(collector.endpoint, spool=Spool(spool_dir, 10**7), **FAST)
    queued = QueuedSink.of(sink)
    for step in range(10):
        assert queued.submit(snapshot(step))
    start = time.monotonic()
    queued.shutdown(0.5)
    assert time.monotonic() - start < 2.0  # close keeps its deadline with the endpoint down
    health = sink.health()
    assert health["spool_points"] == 10 * WIRE and health["points_dropped"] == 0

    collector.start()
    again = OtlpSink(collector.endpoint, spool=Spool(spool_dir, 10**7), **FAST)
    queued = QueuedSink.of(again)
    assert queued.submit(snapshot(10))
    assert queued.force_flush(10.0)
    queued.shutdown(5.0)
    assert collector.received() == expected(range(11))  # the old run's backlog first
    assert again.health()["points_exported"] == 11 * WIRE


def test_a_snapshot_offered_after_shutdown_is_counted_dropped(collector):
    sink = OtlpSink(collector.endpoint, **FAST)
    sink.shutdown()
    assert sink.export(snapshot(0)) is ExportResult.PERMANENT_FAILURE
    assert sink.health()["points_dropped"] == WIRE
