"""RemoteWriteSink's own logic, fast: its sender, retries, backlog bounds, refreshes, flushes,
shutdown's deadline and the kept backlog, against the local HTTP receiver of
``test_remote_write.py``.

Every wait is for an event: a request reaching the receiver (:class:`Gate` counts them and
holds chosen ones), a request answered, shutdown starting, a source entered. The sinks' wall
clock is fixed (:data:`W`), so sample timestamps and ages are exact. A timing assert is a
lower bound (waited at least this long) or an upper bound seconds away from what it bounds.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporters.base import ExportResult, Sink
from exporters.prometheus.families import Family, describe
from exporters.remote_write import RemoteWriteSink, kept_backlog
from exporters.remote_write.config import RemoteWriteConfig
from exporters.remote_write.health import DOWN
from telemetry.model.snapshot import Gauge, Snapshot
from tests.exporters.test_remote_write import RESOURCE, Receiver, _delivered, _samples

W = 1_700_000_000.25  # the sinks' wall clock, Unix seconds
NOW = int(W * 1000)  # its milliseconds: refreshes write at NOW, snapshots without a time too
REPO = Path(__file__).resolve().parents[2]


class Gate(threading.Event):
    """The receiver's gate, counting the requests that reach it: request ``k`` (from 1) waits
    for its own door when it has one (``doors``), else for the gate (open unless cleared)."""

    def __init__(self, doors: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.set()
        self.doors = {k: threading.Event() for k in doors}
        self.arrivals = 0
        self._arrived = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self._arrived:
            self.arrivals += 1
            door = self.doors.get(self.arrivals)
            self._arrived.notify_all()
        if door is not None:
            return door.wait(timeout)
        return super().wait(timeout)

    def reached(self, k: int, timeout_s: float = 10.0) -> bool:
        """Whether request ``k`` reached the receiver (waiting up to ``timeout_s``)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.arrivals >= k, timeout_s)

    def open_all(self) -> None:
        for door in self.doors.values():
            door.set()
        self.set()


class Requests(list):
    """The receiver's decoded requests, with the time each arrived; waitable."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self._cond = threading.Condition()

    def append(self, request) -> None:
        with self._cond:
            self.times.append(time.monotonic())
            super().append(request)
            self._cond.notify_all()

    def wait_until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(condition, timeout_s)


def _answer_with(receiver: Receiver, bodies: dict[int, bytes]) -> None:
    """Make ``receiver`` send ``bodies[status]`` as the body of each answer of that status."""

    class Handler(receiver.server.RequestHandlerClass):
        body = b""

        def send_response(self, code: int, message: str | None = None) -> None:
            self.body = bodies.get(code, b"")
            super().send_response(code, message)

        def send_header(self, keyword: str, value: str) -> None:
            if keyword == "Content-Length":
                value = str(len(self.body))
            super().send_header(keyword, value)

        def end_headers(self) -> None:
            super().end_headers()
            self.wfile.write(self.body)

    receiver.server.RequestHandlerClass = Handler


class Source:
    """A source of one gauge family for :meth:`RemoteWriteSink.add_source`."""

    def __init__(self, name: str) -> None:
        self.family = Family(name, "gauge", f"the test source {name}")

    def describe(self):
        return describe([self.family])

    def collect(self) -> Iterator:
        yield self.family.build(1.0)


class Stuck(Source):
    """A source whose ``collect`` blocks until released: a refresh stuck in it."""

    def __init__(self) -> None:
        super().__init__("stuck_source")
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self) -> Iterator:
        self.entered.set()
        self.release.wait(30)
        yield self.family.build(1.0)


class FailsOnce(Source):
    """A source whose first ``collect`` raises (a bug of a source), the later ones not."""

    def __init__(self) -> None:
        super().__init__("after_failure")
        self.calls = 0

    def collect(self) -> Iterator:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("planted: a source failed")
        yield self.family.build(1.0)


class Wall:
    """An injectable wall clock, Unix seconds."""

    def __init__(self, t: float = W) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Rig:
    """The receivers, sinks and stuck sources of one test, released and closed after it."""

    def __init__(self) -> None:
        self.receivers: list[Receiver] = []
        self.sinks: list[RemoteWriteSink] = []
        self.stuck: list[Stuck] = []

    def receiver(
        self,
        statuses: list[int] | None = None,
        doors: tuple[int, ...] = (),
        bodies: dict[int, bytes] | None = None,
    ) -> Receiver:
        receiver = Receiver(statuses or [204])
        receiver.gate = Gate(doors)
        receiver.requests = Requests()
        if bodies:
            _answer_with(receiver, bodies)
        self.receivers.append(receiver)
        return receiver

    def sink(self, url: str, wall: Callable[[], float] | None = None, **section) -> RemoteWriteSink:
        section = {"collector": "c1", "cluster": "k", "interval_s": 3600.0, **section}
        config = RemoteWriteConfig(enabled=True, url=url, **section)
        sink = RemoteWriteSink(config, wall=wall or Wall())
        self.sinks.append(sink)
        return sink

    def stuck_source(self) -> Stuck:
        stuck = Stuck()
        self.stuck.append(stuck)
        return stuck

    def close(self) -> None:
        for stuck in self.stuck:
            stuck.release.set()
        for receiver in self.receivers:
            receiver.gate.open_all()
        for sink in self.sinks:
            with contextlib.suppress(OSError):
                sink.shutdown(0.0)
        for receiver in self.receivers:  # its server's 0.5 s poll off the test's time
            threading.Thread(target=receiver.close, daemon=True).start()


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.close()


def _snap(name: str = "loss", value: float = 1.0, ms: int | None = NOW) -> Snapshot:
    """One gauge of the trainer's resource (2 samples: the gauge and target_info)."""
    at_ns = 0 if ms is None else ms * 1_000_000
    return Snapshot((Gauge(name, value),), resource=RESOURCE, time_unix_nano=at_ns)


def _when_shutdown_starts(sink: RemoteWriteSink, action: Callable[[], None]) -> None:
    """Run ``action`` once ``sink``'s shutdown has begun (it stops the refresher first)."""

    def run() -> None:
        if sink._stop.wait(30):
            action()

    threading.Thread(target=run, daemon=True).start()


def _timed(call: Callable[[], object]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


def _names(receiver: Receiver, since: int = 0) -> set[str]:
    return {labels["__name__"] for _, series in receiver.requests[since:] for labels, _ in series}


def _stamps(receiver: Receiver, since: int = 0) -> set[tuple[str, float, int]]:
    return {
        (labels["__name__"], value, ts)
        for _, series in receiver.requests[since:]
        for labels, samples in series
        for value, ts in samples
    }


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("exporters.remote")]


# -- export and labels -------------------------------------------------------------------


def test_a_snapshot_is_written_at_its_commit_time_else_at_the_wall_clock(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, external_labels={"region": "eu"})
    committed = Snapshot(
        (Gauge("a", 1.0),), resource=RESOURCE, time_unix_nano=1_699_999_999_876_543_210
    )
    assert sink.export(committed) is ExportResult.SUCCESS
    assert sink.export(_snap("b", ms=None)) is ExportResult.SUCCESS  # no commit time
    assert sink.force_flush(10) is True
    stamps = {labels["__name__"]: ts for labels, _, ts in _samples(receiver)}
    assert stamps["a"] == 1_699_999_999_876 and stamps["b"] == NOW
    labels = next(labels for labels, _, _ in _samples(receiver) if labels["__name__"] == "b")
    assert (labels["collector"], labels["cluster"], labels["region"]) == ("c1", "k", "eu")


def test_the_collector_label_is_the_hostname_unless_set(rig):
    assert rig.sink("http://127.0.0.1:9/w", collector="").external_labels["collector"] == (
        socket.gethostname()
    )
    assert rig.sink("http://127.0.0.1:9/w").external_labels["collector"] == "c1"


def test_defaults_are_the_sink_contracts_and_a_summary_every_60_s(rig):
    for name in ("export", "force_flush", "shutdown"):
        ours = inspect.signature(getattr(RemoteWriteSink, name)).parameters["timeout_s"]
        contract = inspect.signature(getattr(Sink, name)).parameters["timeout_s"]
        assert ours.default == contract.default == 10.0, name
    assert rig.sink("http://127.0.0.1:9/w").health.summary_s == 60.0


def test_the_config_may_be_named_the_clocks_only_named(rig):
    """Two clocks of one type side by side: a positional one would be taken for the other."""
    config = RemoteWriteConfig(enabled=True, url="http://127.0.0.1:9/w")
    rig.sinks.append(RemoteWriteSink(config=config))
    with pytest.raises(TypeError):
        RemoteWriteSink(config, time.monotonic)


def test_after_shutdown_exports_fail_and_a_second_shutdown_does_nothing(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url)
    assert sink.export(_snap()) is ExportResult.SUCCESS
    sink.shutdown(10)
    sink.shutdown(10)
    assert sink.export(_snap(ms=NOW + 1)) is ExportResult.PERMANENT_FAILURE
    assert sink.health.counts().sent == 2 and sink.pending_samples == 0


def test_a_rejected_snapshot_fails_permanently_is_logged_and_counted(rig, caplog):
    receiver = rig.receiver()
    wall = Wall()
    sink = rig.sink(receiver.url, wall=wall)

    def errors() -> float:
        assert sink.force_flush(10)
        return next(
            value
            for labels, value, _ in reversed(_samples(receiver))
            if labels["__name__"] == "rltel_prometheus_export_errors_total"
        )

    sink.refresh()
    assert errors() == 0

    class NotAPoint:
        attributes = ()

    bad = Snapshot(points=(NotAPoint(),))  # type: ignore[arg-type]
    assert sink.export(bad) is ExportResult.PERMANENT_FAILURE
    assert any("snapshot rejected" in r.getMessage() for r in caplog.records)
    wall.t += 1
    sink.refresh()
    assert errors() == 1


def test_samples_before_their_series_last_one_are_counted_late_once(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap(value=1.0, ms=NOW - 1000))
    assert sink.health.counts().late == 0
    sink.export(_snap(value=2.0, ms=NOW - 2000))  # loss and target_info before their last
    assert sink.health.counts().late == 2
    sink.export(_snap(value=3.0, ms=NOW - 900))
    sink.export(_snap(value=4.0, ms=NOW - 800))
    assert sink.health.counts().late == 2


# -- own metrics and refreshes -----------------------------------------------------------


def test_self_metrics_on_writes_the_collectors_own_series_and_every_source(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url)
    sink.add_source(Source("own_source"))
    sink.add_source(Source("other_source"), own=False)
    sink.refresh()
    assert sink.force_flush(10)
    names = _names(receiver)
    assert {"up", "own_source", "other_source"} <= names
    assert "rltel_collector_remote_write_samples_sent_total" in names
    assert "rltel_prometheus_export_errors_total" in names  # the series store's own
    up = next(labels for labels, _, _ in _samples(receiver) if labels["__name__"] == "up")
    assert (up["job"], up["instance"]) == ("rltel-collector", "c1")


def test_self_metrics_off_writes_only_the_sources_that_are_not_own(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.add_source(Source("own_source"))
    sink.add_source(Source("other_source"), own=False)
    sink.refresh()
    assert sink.force_flush(10)
    assert _names(receiver) == {"other_source"}


def test_a_refresh_writes_the_idle_series_at_the_wall_clock_and_nothing_twice(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, self_metrics=False, max_sample_age_s=7200.0)
    sink.export(_snap("idle", ms=NOW - 3_600_000))  # interval_s (3600 s) ago: idle
    sink.export(_snap("busy", ms=NOW - 3_599_999))  # and target_info: not idle yet
    assert sink.force_flush(10)
    before = len(receiver.requests)
    sink.refresh()
    sink.refresh()  # nothing idle since the first
    sink.export(_snap("marker", ms=NOW - 1))  # after everything the refreshes queued
    assert sink.force_flush(10)
    assert _stamps(receiver, before) == {
        ("idle", 1.0, NOW),
        ("marker", 1.0, NOW - 1),
        ("target_info", 1.0, NOW - 1),
    }


def test_the_refresher_writes_every_interval_and_survives_a_failing_source(rig, caplog):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, self_metrics=False, interval_s=0.05)
    sink.add_source(FailsOnce(), own=False)
    assert receiver.requests.wait_until(lambda: "after_failure" in _names(receiver))
    assert "remote_write sink: refresh failed" in _messages(caplog)


# -- drops -------------------------------------------------------------------------------


def test_a_full_backlog_drops_its_oldest_writes_once_logged_and_resends_every_total(rig, caplog):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, self_metrics=False, max_pending_samples=4)
    sink.export(_snap(value=0.0, ms=NOW - 50))
    assert receiver.gate.reached(1)  # its write is held: the batch being sent, aside
    sink.export(_snap(value=1.0, ms=NOW - 40))
    sink.export(_snap(value=2.0, ms=NOW - 30))  # 4 samples wait: the bound, no drop
    assert sink.health.counts().dropped["backlog_full"] == 0
    sink.export(_snap(value=3.0, ms=NOW - 20))
    sink.export(_snap(value=4.0, ms=NOW - 10))
    assert sink.health.counts().dropped["backlog_full"] == 4
    assert sink.pending_samples == 6  # the held batch and the bound
    receiver.gate.doors[1].set()
    assert sink.force_flush(10)
    assert [v for labels, v, _ in _samples(receiver) if labels["__name__"] == "loss"] == [
        0.0,
        3.0,
        4.0,
    ]
    before = len(receiver.requests)
    sink.refresh()  # after a drop: every series, idle or not
    assert sink.force_flush(10)
    assert _stamps(receiver, before) == {("loss", 4.0, NOW), ("target_info", 1.0, NOW)}
    full = [m for m in _messages(caplog) if "backlog full" in m]
    assert len(full) == 1 and "2 samples dropped" in full[0]
    assert "max_pending_samples=4" in full[0]


def test_a_write_past_the_accepted_age_is_dropped_unsent_and_every_total_resent(rig, caplog):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, self_metrics=False, max_sample_age_s=60.0)
    oldest = NOW - 60_000  # the oldest accepted: 60 s before the wall clock
    sink.export(_snap("old", ms=oldest - 1))
    sink.export(_snap("new", ms=oldest))
    assert sink.force_flush(10)
    assert _stamps(receiver) == {("new", 1.0, oldest), ("target_info", 1.0, oldest)}
    counts = sink.health.counts()
    assert counts.dropped["too_old"] == 2 and counts.sent == 2
    assert any("older than max_sample_age_s=60" in m for m in _messages(caplog))
    before = len(receiver.requests)
    sink.refresh()  # after a drop: every series, idle or not
    assert sink.force_flush(10)
    assert _names(receiver, before) == {"old", "new", "target_info"}


def test_a_refused_write_is_dropped_counted_and_every_total_resent(rig):
    receiver = rig.receiver([400, 204])
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap())
    assert sink.force_flush(10)
    counts = sink.health.counts()
    assert (counts.sent, counts.rejected, counts.dropped["refused"]) == (0, 2, 2)
    assert counts.state == "refusing"
    sink.refresh()  # after a refusal: every series, idle or not
    assert sink.force_flush(10)
    assert _stamps(receiver, 1) == {("loss", 1.0, NOW + 1), ("target_info", 1.0, NOW + 1)}
    counts = sink.health.counts()
    assert (counts.sent, counts.rejected, counts.state) == (2, 2, "ok")


def test_a_write_refused_for_one_sample_delivers_the_other_in_parts(rig, caplog):
    receiver = rig.receiver([400, 204, 400], bodies={400: b"out of order sample"})
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap())
    assert sink.force_flush(10)
    assert [len(series) for _, series in receiver.requests] == [2, 1, 1]
    counts = sink.health.counts()
    assert (counts.sent, counts.rejected, counts.dropped["refused"]) == (1, 1, 1)
    assert any(
        "write of 1 samples refused (HTTP 400: out of order sample; the write's other 1"
        " samples sent in parts)" in m
        for m in _messages(caplog)
    )


# -- retries and flushes -----------------------------------------------------------------


def test_a_request_timeout_of_a_second_sends(rig):
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, timeout_s=1.0)
    sink.export(_snap())
    assert receiver.requests.wait_until(lambda: len(receiver.requests) >= 1)
    assert _delivered(sink)


def test_a_request_timeout_of_10_ms_still_sends(rig):
    """Found by the mutation run: a timeout of 0.01 s or less was taken for shutdown's
    deadline, so nothing was ever sent."""
    receiver = rig.receiver()
    sink = rig.sink(receiver.url, timeout_s=0.01)
    assert sink.export(_snap()) is ExportResult.SUCCESS
    deadline = time.monotonic() + 10
    while not receiver.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert receiver.requests  # sent, whether or not the answer came within 10 ms


def test_retries_wait_a_backoff_doubling_from_0_1_s_and_are_counted(rig, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    receiver = rig.receiver([503] * 5 + [204])
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap())
    assert _delivered(sink)
    times = receiver.requests.times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 5
    for gap, backoff in zip(gaps, (0.1, 0.2, 0.4, 0.8, 1.6)):
        assert gap >= backoff - 0.005, gaps
    assert sum(gaps) < 3.1 + 2.5, gaps
    counts = sink.health.counts()
    assert (counts.sent, counts.retries, counts.state) == (2, 5, "ok")
    assert f"remote_write {receiver.url}: receiver unavailable (HTTP 503: )" in _messages(caplog)[0]


def test_force_flush_waits_for_the_write_in_flight_and_is_true_once_delivered(rig):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, timeout_s=30.0)
    sink.export(_snap())
    assert receiver.gate.reached(1)
    assert sink.pending_samples == 2
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(sink.force_flush(10)))
    flusher.start()
    flusher.join(0.5)
    assert flushed == []  # still waiting: the write is held
    receiver.gate.doors[1].set()
    flusher.join(10)
    assert flushed == [True]


def test_force_flush_waits_0_8_of_its_timeout_for_a_write_held_at_the_receiver(rig):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, timeout_s=30.0)  # held, not failed, all along
    sink.export(_snap())
    assert receiver.gate.reached(1)
    assert _timed(lambda: sink.force_flush(0.9)) >= 0.71
    assert _timed(lambda: sink.force_flush(0.25)) >= 0.19
    assert _timed(lambda: [sink.force_flush(0.05) for _ in range(6)]) < 2.5
    assert sink.force_flush(0.05) is False


def test_force_flush_does_not_wait_while_the_receiver_is_down(rig):
    receiver = rig.receiver([503], doors=(2,))
    sink = rig.sink(receiver.url)
    sink.export(_snap())
    assert receiver.gate.reached(2)  # the first try failed: down, its retry held
    assert sink.health.state == DOWN
    result: list[bool] = []
    assert _timed(lambda: result.append(sink.force_flush(10))) < 4.0
    assert result == [False]


# -- shutdown ----------------------------------------------------------------------------


def test_shutdown_sends_the_backlog_and_returns_once_it_is_delivered(rig, caplog):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap(value=1.0, ms=NOW - 2))
    assert receiver.gate.reached(1)
    sink.export(_snap(value=2.0, ms=NOW - 1))
    _when_shutdown_starts(sink, receiver.gate.doors[1].set)
    assert _timed(lambda: sink.shutdown(10)) < 5.0
    counts = sink.health.counts()
    assert (counts.sent, counts.dropped["shutdown"], counts.pending) == (4, 0, 0)
    assert len(receiver.requests) == 2
    assert not any("dropped" in m for m in _messages(caplog))


def test_shutdown_gives_up_at_its_deadline_and_counts_nothing_answered_after(rig, caplog):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, self_metrics=False, timeout_s=30.0)
    sink.export(_snap(value=1.0, ms=NOW - 2))
    assert receiver.gate.reached(1)  # held: its request's own timeout is 30 s
    sink.export(_snap(value=2.0, ms=NOW - 1))
    assert 1.4 <= _timed(lambda: sink.shutdown(1.5)) < 5.0
    counts = sink.health.counts()
    assert (counts.sent, counts.dropped["shutdown"], counts.pending) == (0, 4, 0)
    assert any("4 samples dropped: undelivered at shutdown" in m for m in _messages(caplog))
    receiver.gate.doors[1].set()  # answered now: too late, the write was counted dropped
    sink._sender.join(10)
    assert not sink._sender.is_alive()
    counts = sink.health.counts()
    assert (counts.sent, counts.rejected, counts.dropped["shutdown"]) == (0, 0, 4)


def test_shutdown_waits_for_a_stuck_refresh_until_its_deadline_not_after(rig):
    receiver = rig.receiver()
    stuck = rig.stuck_source()
    sink = rig.sink(receiver.url, interval_s=0.05)
    sink.add_source(stuck, own=False)
    assert stuck.entered.wait(10)
    assert 1.4 <= _timed(lambda: sink.shutdown(1.5)) < 5.0


def test_a_refresh_that_outlives_shutdown_counts_its_samples_dropped(rig):
    """Found by the mutation run: a refresh still inside a source when shutdown's deadline
    passed wrote into the closed sink's backlog, where nothing sends, keeps or counts it."""
    receiver = rig.receiver()
    stuck = rig.stuck_source()
    sink = rig.sink(receiver.url, interval_s=0.05)
    sink.add_source(stuck, own=False)
    assert stuck.entered.wait(10)
    sink.shutdown(0.2)
    dropped = sink.health.counts().dropped["shutdown"]
    stuck.release.set()
    sink._refresher.join(10)
    assert not sink._refresher.is_alive()
    assert sink.pending_samples == 0
    assert sink.health.counts().dropped["shutdown"] > dropped  # the refresh's samples


def test_a_retry_cut_by_shutdowns_deadline_is_not_counted_and_the_sender_ends_there(rig, caplog):
    receiver = rig.receiver([503, 204], doors=(1, 2))
    sink = rig.sink(receiver.url, self_metrics=False, timeout_s=30.0)
    sink.export(_snap())
    assert receiver.gate.reached(1)
    _when_shutdown_starts(sink, receiver.gate.doors[1].set)  # 503 once shutdown began
    assert 1.4 <= _timed(lambda: sink.shutdown(1.5)) < 5.0
    assert receiver.gate.reached(2, 0.0)  # the retry went, its timeout cut to the deadline
    sink._sender.join(3.0)
    assert not sink._sender.is_alive()  # it gave up at the deadline, not 30 s later
    counts = sink.health.counts()
    assert (counts.retries, counts.sent, counts.dropped["shutdown"]) == (1, 0, 2)
    assert not any("sender failed" in m for m in _messages(caplog))


def test_without_a_kept_backlog_shutdown_tries_until_its_deadline_while_down(rig):
    receiver = rig.receiver([503, 204], doors=(2,))
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.export(_snap())
    assert receiver.gate.reached(2)  # down, its retry held
    _when_shutdown_starts(sink, receiver.gate.doors[2].set)
    assert _timed(lambda: sink.shutdown(10)) < 5.0
    counts = sink.health.counts()
    assert (counts.sent, counts.dropped["shutdown"]) == (2, 0)


def test_shutdown_while_down_keeps_the_backlog_at_once(rig, tmp_path):
    """Five sinks, each with its retry held at a receiver that answered 503 and a refresh
    stuck in a source: shutting all five down keeps each backlog without waiting."""
    sinks = []
    for i in range(5):
        receiver = rig.receiver([503], doors=(2,))
        stuck = rig.stuck_source()
        sink = rig.sink(receiver.url, interval_s=0.05, timeout_s=30.0)
        sink.add_source(stuck, own=False)
        (tmp_path / str(i)).mkdir()
        sink.keep_in(tmp_path / str(i))
        sink.export(_snap())
        sinks.append((sink, receiver, stuck))
    for sink, receiver, stuck in sinks:
        assert receiver.gate.reached(2) and stuck.entered.wait(10)
        assert sink.health.state == DOWN
    start = time.monotonic()
    for sink, _, _ in sinks:
        assert _timed(lambda: sink.shutdown(10)) < 2.5  # noqa: B023
    assert time.monotonic() - start < 2.5
    for i, (sink, _, _) in enumerate(sinks):
        writes, _ = kept_backlog.load(tmp_path / str(i) / kept_backlog.FILE)
        assert [samples for _, samples, _ in writes] == [2]
        assert sink.health.counts().dropped["shutdown"] == 0


def test_shutdown_with_the_receiver_up_sends_before_keeping(rig, tmp_path):
    receiver = rig.receiver(doors=(1,))
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.keep_in(tmp_path)
    sink.export(_snap())
    assert receiver.gate.reached(1)
    _when_shutdown_starts(sink, receiver.gate.doors[1].set)
    assert _timed(lambda: sink.shutdown(10)) < 5.0
    assert sink.health.counts().sent == 2
    assert not (tmp_path / kept_backlog.FILE).exists()


def test_a_backlog_that_cannot_be_kept_is_counted_dropped_and_raised(rig, tmp_path, caplog):
    receiver = rig.receiver([503], doors=(2,))
    sink = rig.sink(receiver.url, self_metrics=False)
    directory = tmp_path / "state"
    directory.mkdir()
    sink.keep_in(directory)
    sink.export(_snap())
    assert receiver.gate.reached(2)
    shutil.rmtree(directory)
    with pytest.raises(OSError):
        sink.shutdown(10)
    assert sink.health.counts().dropped["shutdown"] == 2
    assert any("undelivered at shutdown, not kept" in m for m in _messages(caplog))


def test_a_kept_backlog_goes_first_and_its_file_goes_once_its_last_write_left(rig, tmp_path):
    down = rig.receiver([503], doors=(2,))
    first = rig.sink(down.url, self_metrics=False)
    first.keep_in(tmp_path)
    first.export(_snap(value=1.0, ms=NOW - 3))
    assert down.gate.reached(2)
    first.export(_snap(value=2.0, ms=NOW - 2))
    first.shutdown(10)
    writes, _ = kept_backlog.load(tmp_path / kept_backlog.FILE)
    assert [samples for _, samples, _ in writes] == [2, 2]

    up = rig.receiver(doors=(2,))
    second = rig.sink(up.url, self_metrics=False, max_batch_samples=2)
    second.keep_in(tmp_path)
    second.export(_snap(value=3.0, ms=NOW - 1))
    assert up.gate.reached(2)  # the first kept write delivered, the second held
    assert (tmp_path / kept_backlog.FILE).exists()
    up.gate.doors[2].set()
    assert second.force_flush(10)
    assert not (tmp_path / kept_backlog.FILE).exists()
    assert [(v, ts) for labels, v, ts in _samples(up) if labels["__name__"] == "loss"] == [
        (1.0, NOW - 3),
        (2.0, NOW - 2),
        (3.0, NOW - 1),
    ]


def test_a_damaged_kept_backlog_is_left_and_nothing_is_kept(rig, tmp_path):
    (tmp_path / kept_backlog.FILE).write_bytes(b"RLRWKEPT1garbage")
    receiver = rig.receiver([503], doors=(2,))
    sink = rig.sink(receiver.url, self_metrics=False)
    sink.keep_in(tmp_path)
    sink.export(_snap())
    assert receiver.gate.reached(2)
    sink.shutdown(0.1)
    assert sink.health.counts().dropped["shutdown"] == 2
    assert (tmp_path / kept_backlog.FILE).read_bytes() == b"RLRWKEPT1garbage"


# -- the threads -------------------------------------------------------------------------


def test_a_sender_bug_is_logged_and_shutdown_counts_what_is_left(rig, caplog):
    def broken() -> float:
        raise RuntimeError("planted: the wall clock failed")

    receiver = rig.receiver()
    sink = rig.sink(receiver.url, wall=broken, self_metrics=False)
    sink._sender.join(10)  # the sender's first look at the backlog reads the wall clock
    assert "remote_write sink: sender failed" in _messages(caplog)
    sink.export(_snap())
    sink.shutdown(1.0)
    assert sink.health.counts().dropped["shutdown"] == 2
    assert receiver.requests == []


def test_the_sinks_threads_do_not_keep_a_process_from_exiting():
    """A collector that exits without shutting its sink down (an error) must not hang: the
    sender retrying a down receiver and the refresher are daemon threads."""
    code = (
        "from exporters.remote_write import RemoteWriteSink\n"
        "from exporters.remote_write.config import RemoteWriteConfig\n"
        "config = RemoteWriteConfig(enabled=True, url='http://127.0.0.1:9/w', interval_s=0.05)\n"
        "RemoteWriteSink(config)\n"
        "print('started')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout == "started\n", done.stderr
