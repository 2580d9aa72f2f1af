"""QueuedSink and FanOut: isolation, drop-and-count, retries, timeouts, shutdown, overflow."""

from __future__ import annotations

import threading
import time

import pytest

from exporters.base import ExportResult, InMemorySink, Sink
from exporters.factory import BuildContext, SinkFactory
from exporters.fanout import FanOut, QueuedSink
from exporters.registry import build_sinks, enabled
from telemetry.config import load_config
from tests.exporters.overflows import ListOverflow
from tests.exporters.test_queued import snap


class Raising(Sink):
    name = "raising"

    def __init__(self) -> None:
        self.calls = 0

    def export(self, snapshot, timeout_s=10.0):
        self.calls += 1
        raise RuntimeError("boom")


class Sleeping(Sink):
    """Stalls on the first export for ``stall_s``, then answers at once."""

    name = "sleeping"

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.calls = 0
        self.release = threading.Event()
        self.returned = threading.Event()  # the stalled first call is over

    def export(self, snapshot, timeout_s=10.0):
        self.calls += 1
        if self.calls == 1:
            self.release.wait(self.stall_s)
            self.returned.set()
        return ExportResult.SUCCESS


class Flaky(Sink):
    """Returns ``results`` in order, then SUCCESS."""

    name = "flaky"

    def __init__(self, results: list[ExportResult]) -> None:
        self.results = list(results)
        self.calls = 0
        self.shutdowns = 0

    def export(self, snapshot, timeout_s=10.0):
        self.calls += 1
        return self.results.pop(0) if self.results else ExportResult.SUCCESS

    def shutdown(self, timeout_s=10.0):
        self.shutdowns += 1


def test_isolation_raising_and_stalling_sinks_do_not_hold_up_others():
    good, other = InMemorySink(), InMemorySink()
    raising, sleeping = Raising(), Sleeping(stall_s=30.0)
    fan = FanOut([good, raising, sleeping, other], queue_size=64, timeout_s=0.2)
    steps = 20
    for step in range(steps):
        assert fan.export(snap(step)) is True
    assert not sleeping.returned.is_set()  # every export returned inside the stalled call
    assert fan.force_flush(timeout_s=3.0) is False  # the stalled sink cannot flush
    sent = [s.step.global_step for s in good.snapshots]
    assert sent == list(range(steps))
    assert [s.step.global_step for s in other.snapshots] == list(range(steps))
    assert all(a is b for a, b in zip(good.snapshots, other.snapshots, strict=True))
    stats = fan.stats()
    assert stats["memory"].exported == steps and stats["memory#2"].exported == steps
    assert stats["raising"].failed == steps and raising.calls == steps
    sleeping_stats = stats["sleeping"]
    # the stalled call is abandoned; the rest fail fast while it is still running
    assert sleeping_stats.timed_out == 1
    assert sleeping_stats.failed == steps and sleeping_stats.degraded
    assert sleeping.calls == 1
    sleeping.release.set()
    assert sleeping.returned.wait(5.0)
    step = steps
    deadline = time.monotonic() + 10.0
    while fan.stats()["sleeping"].exported == 0:  # the abandoned call's thread may still end
        assert time.monotonic() < deadline, "the sink did not recover"
        fan.export(snap(step))
        fan.force_flush(timeout_s=3.0)
        step += 1
    recovered = fan.stats()["sleeping"]
    assert recovered.exported >= 1 and not recovered.degraded
    fan.shutdown(timeout_s=2.0)
    assert good.shut_down and other.shut_down


def test_full_queue_drops_and_counts():
    sleeping = Sleeping(stall_s=5.0)
    queued = QueuedSink(sleeping, queue_size=3, timeout_s=5.0)
    accepted = [queued.submit(snap(i)) for i in range(10)]
    time.sleep(0.05)  # the worker holds the first snapshot in the stalled call
    stats = queued.stats()
    # the first submit is popped by the worker, 3 more fit in the queue
    assert accepted.count(True) in (3, 4)
    assert stats.dropped == 10 - accepted.count(True)
    assert stats.queue_depth <= 3
    sleeping.release.set()
    assert queued.force_flush(2.0)
    assert queued.stats().exported == accepted.count(True)
    queued.shutdown(1.0)


def test_retries_only_retryable_failures_with_backoff():
    flaky = Flaky([ExportResult.FAILURE, ExportResult.FAILURE])
    queued = QueuedSink(flaky, timeout_s=1.0, backoff_s=0.01)
    queued.submit(snap(0))
    assert queued.force_flush(2.0)
    stats = queued.stats()
    assert (flaky.calls, stats.retried, stats.exported, stats.failed) == (3, 2, 1, 0)
    assert stats.last_latency_s is not None and stats.last_latency_s >= 0

    permanent = Flaky([ExportResult.PERMANENT_FAILURE])
    queued2 = QueuedSink(permanent, timeout_s=1.0, backoff_s=0.01)
    queued2.submit(snap(0))
    assert queued2.force_flush(2.0)
    assert (permanent.calls, queued2.stats().retried, queued2.stats().failed) == (1, 0, 1)

    exhausted = Flaky([ExportResult.FAILURE] * 10)
    queued3 = QueuedSink(exhausted, timeout_s=1.0, max_retries=2, backoff_s=0.01)
    queued3.submit(snap(0))
    assert queued3.force_flush(2.0)
    assert (exhausted.calls, queued3.stats().failed) == (3, 1)
    for q in (queued, queued2, queued3):
        q.shutdown(1.0)


def test_shutdown_drains_with_deadline_and_is_idempotent():
    flaky = Flaky([])
    queued = QueuedSink(flaky, timeout_s=1.0)
    for i in range(5):
        queued.submit(snap(i))
    queued.shutdown(2.0)
    queued.shutdown(2.0)
    assert flaky.calls == 5 and flaky.shutdowns == 1
    assert queued.submit(snap(9)) is False and queued.stats().dropped == 1

    sleeping = Sleeping(stall_s=5.0)
    stuck = QueuedSink(sleeping, timeout_s=5.0)
    for i in range(4):
        stuck.submit(snap(i))
    start = time.monotonic()
    stuck.shutdown(0.3)
    assert time.monotonic() - start < 1.5
    assert stuck.stats().dropped == 3  # the first is in the stalled call
    sleeping.release.set()


def test_shutdown_waits_for_an_abandoned_slow_export_then_shuts_the_sink_down():
    class Slow(Flaky):
        name = "slow"

        def export(self, snapshot, timeout_s=10.0):
            time.sleep(0.4)  # past the 0.1 s timeout, well within the shutdown deadline
            return super().export(snapshot, timeout_s)

    slow = Slow([])
    queued = QueuedSink(slow, timeout_s=0.1)
    queued.submit(snap(0))
    time.sleep(0.2)  # the call is now abandoned, still running
    assert queued.stats().degraded
    queued.shutdown(3.0)
    assert slow.shutdowns == 1  # the run is finished, not left open


def test_unused_queued_sink_shuts_down():
    flaky = Flaky([])
    QueuedSink(flaky).shutdown(1.0)
    assert flaky.shutdowns == 1


def test_built_by_finds_the_first_sink_a_package_built_and_none_for_another():
    ours, theirs = (
        SinkFactory(name, "enabled", bool, lambda config, context: InMemorySink())
        for name in ("ours", "theirs")
    )
    by_hand = InMemorySink()  # built by no factory
    first, second = (ours.build(None, BuildContext()) for _ in range(2))
    fanout = FanOut([by_hand, first, second])
    try:
        assert fanout.built_by(ours) is first
        assert fanout.built_by(theirs) is None
    finally:
        fanout.shutdown(1.0)


def enabled_sinks(config) -> list[str]:
    return [factory.name for factory in enabled(config, companions=False)]


def test_factory_builds_only_enabled_sinks(tmp_path):
    assert enabled_sinks(load_config({})) == ["console"]  # AReaL prints its stats by default
    off = {"console": {"enabled": False}}
    assert build_sinks(load_config(off), companions=False) == []
    config = load_config(
        {"fileroot": str(tmp_path), "prometheus": {"enabled": True, "port": 0}, **off}
    )
    assert enabled_sinks(config) == ["prometheus"]
    sinks = build_sinks(config, companions=False)
    try:
        assert [type(s).__name__ for s in sinks] == ["PrometheusSink"]
    finally:
        for sink in sinks:
            sink.shutdown()
    config = load_config(
        {
            "wandb": {"mode": "offline"},
            "swanlab": {"mode": "local"},
            "tensorboard": {"path": str(tmp_path)},
            "console": {"enabled": True},
        }
    )
    assert enabled_sinks(config) == ["console", "swanlab", "tensorboard", "wandb"]
    light = load_config({"console": {"enabled": True}, "tensorboard": {"path": str(tmp_path)}})
    sinks = build_sinks(light, companions=False)
    try:
        assert [type(s).__name__ for s in sinks] == ["ConsoleSink", "TensorBoardSink"]
    finally:
        for sink in sinks:
            sink.shutdown()


class Exiting(Sink):
    """Raises ``error`` from every call while ``failing``; then succeeds."""

    name = "exiting"

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.failing = True
        self.calls = 0

    def export(self, snapshot, timeout_s=10.0):
        self.calls += 1
        if self.failing:
            raise self.error
        return ExportResult.SUCCESS

    def force_flush(self, timeout_s=10.0):
        if self.failing:
            raise self.error
        return True

    def shutdown(self, timeout_s=10.0):
        raise self.error


class Unusual(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), Unusual("odd")])
def test_a_sink_raising_any_base_exception_is_caught_logged_counted_degraded(error, caplog):
    exiting, good = Exiting(error), InMemorySink()
    fan = FanOut([exiting, good], queue_size=8, timeout_s=1.0)
    for step in range(5):
        assert fan.export(snap(step))
    assert fan.force_flush(3.0) is False  # the exiting sink's flush raised: not flushed
    stats = fan.stats()["exiting"]
    assert (stats.failed, stats.exported, stats.queue_depth, stats.degraded) == (5, 0, 0, True)
    assert exiting.calls == 5 and len(good.snapshots) == 5
    assert f"raised {type(error).__name__}" in caplog.text
    assert "force_flush raised" in caplog.text
    worker = fan.queued[0]._thread
    assert worker is not None and worker.is_alive()  # the worker survived every raise
    exiting.failing = False
    assert fan.export(snap(5))
    assert fan.force_flush(3.0) is True
    stats = fan.stats()["exiting"]
    assert (stats.failed, stats.exported, stats.degraded) == (5, 1, False)
    exiting.failing = True
    fan.shutdown(2.0)  # the sink's shutdown raises: logged, never raised here
    assert good.shut_down and "shutdown raised" in caplog.text


class Outage(InMemorySink):
    """Answers FAILURE while ``down``; with an overflow. ``hang`` blocks an export until
    the sink is shut down, which ends it with FAILURE (like a channel closing)."""

    name = "outage"

    def __init__(self, hang: bool = False) -> None:
        super().__init__()
        self.down = True
        self.hang = hang
        self.ended = threading.Event()
        self.overflow = ListOverflow(self)

    def export(self, snapshot, timeout_s=10.0):
        if self.hang and not self.ended.is_set():
            self.ended.wait(timeout_s)
            return ExportResult.FAILURE
        if self.down and not self.shut_down:
            return ExportResult.FAILURE
        return super().export(snapshot, timeout_s)

    def shutdown(self, timeout_s=10.0):
        super().shutdown(timeout_s)
        self.ended.set()


def test_an_overflow_keeps_what_the_queue_cannot_and_replays_it_first_in_order():
    sink = Outage()
    queued = QueuedSink(sink, queue_size=4, backoff_s=0.01, max_backoff_s=0.02, spill_after_s=0.05)
    depths = []
    for step in range(30):  # the sink is down: the queue fills, then spills
        assert queued.submit(snap(step))
        depths.append(queued.depth())
        time.sleep(0.003)
    assert max(depths) <= 4 and queued.stats().dropped == 0
    assert queued.force_flush(0.2) is False  # not delivered yet
    deadline = time.monotonic() + 5
    while sink.overflow.spilled < 30 and time.monotonic() < deadline:
        time.sleep(0.01)  # failures last: everything in memory moves to the overflow
    assert sink.overflow.spilled == 30 and queued.stats().degraded
    sink.down = False
    for step in range(30, 33):  # queued behind the overflow, delivered after it
        assert queued.submit(snap(step))
    assert queued.force_flush(5.0)
    assert [s.step.global_step for s in sink.snapshots] == list(range(33))
    stats = queued.stats()
    assert (stats.exported, stats.failed, stats.dropped, stats.degraded) == (33, 0, 0, False)
    assert len(sink.overflow) == 0
    queued.shutdown(1.0)


def test_shutdown_ends_a_hung_call_and_spills_it_first_within_its_deadline():
    sink = Outage(hang=True)
    queued = QueuedSink(sink, timeout_s=10.0, backoff_s=0.01, spill_after_s=5.0)
    for step in range(3):
        assert queued.submit(snap(step))
    time.sleep(0.1)  # snapshot 0 is in the hung call
    start = time.monotonic()
    queued.shutdown(0.4)
    assert time.monotonic() - start < 0.6
    assert [s.step.global_step for s in sink.overflow.entries] == [0, 1, 2]
    assert sink.shut_down and queued.stats().dropped == 0


def test_a_sink_that_cannot_be_built_shuts_down_those_built_before_it(tmp_path):
    import socket

    from tests.distributed import free_port

    port = free_port()
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    config = load_config(
        {
            "fileroot": str(tmp_path),
            "console": {"enabled": False},
            "prometheus": {"enabled": True, "port": port},
            "tensorboard": {"path": str(not_a_dir / "tb")},
        }
    )
    assert enabled_sinks(config) == ["prometheus", "tensorboard"]
    with pytest.raises(Exception, match="tb"):
        build_sinks(config)
    with socket.socket() as probe:  # the Prometheus sink built first released its port
        probe.bind(("127.0.0.1", port))
