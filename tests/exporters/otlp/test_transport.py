"""The OTLP delivery path (OtlpSink behind its QueuedSink, the spool as overflow) against a
real OTLP/gRPC receiver: order, retries, spool, drops, close, fork."""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import threading
import time

import grpc
import pytest

from exporters.base import ExportResult
from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
from exporters.otlp.spool import Spool, batch_to_json
from exporters.otlp.transport import OtlpSender
from exporters.queued import QueuedSink
from telemetry.model.snapshot import Counter, Histogram, ScalarMean, Snapshot, Step
from telemetry.otlp.encode import Batch
from tests.exporters.otlp.test_outage import wait_until
from tests.telemetry.otlp_receiver import Receiver, metrics_of, point_count, step_of

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 2.0}
WIRE = 3 + HEALTH_POINTS  # points per request of batch(step): 3 gauges, the sender's health


def batch(step: int, n: int = 3) -> Snapshot:
    points = tuple(ScalarMean(f"g/{i}", float(step), count=1) for i in range(n))
    return Snapshot(points, Step(0, step, step), (("rltel.role", "trainer"),), 10 + step)


class Otlp:
    """The OTLP sink behind its own queue, as the StatsLogger's fan-out runs it."""

    def __init__(self, endpoint: str, **options) -> None:
        self.sink = OtlpSink(endpoint, **{**FAST, **options})
        self.queued = QueuedSink.of(self.sink)

    def submit(self, snapshot: Snapshot) -> bool:
        return self.queued.submit(snapshot)

    def health(self) -> dict:
        return self.sink.health()

    def health_points(self) -> list:
        return self.sink.health_points()

    def close(self, timeout_s: float) -> bool:
        """Shut down; True when everything submitted was delivered or refused for good."""
        self.queued.shutdown(timeout_s)
        health = self.health()
        return health["points_dropped"] == 0 and health["spool_points"] == 0

    def settled(self, timeout_s: float = 10.0) -> None:
        """Wait for the worker to end: on a loaded machine it may spill what it held after
        shutdown's deadline (the design says so), and a test reads the spool after that."""
        worker = self.queued._thread
        if worker is not None:
            worker.join(timeout_s)
            assert not worker.is_alive(), "the sink's worker did not end"

    def room(self, below: int, timeout_s: float = 10.0) -> None:
        """Wait until fewer than ``below`` snapshots are queued (the worker had the CPU)."""
        deadline = time.monotonic() + timeout_s
        while self.queued.stats().queue_depth >= below:
            assert time.monotonic() < deadline, "the queue never drained"
            time.sleep(0.001)


def steps(receiver: Receiver) -> list[int]:
    return [step_of(request) for request in receiver.requests]


@pytest.fixture
def receiver():
    with Receiver() as running:
        yield running


def test_batches_arrive_in_order_and_health_counts_them(receiver):
    transport = Otlp(receiver.endpoint, **FAST)
    for step in range(20):
        assert transport.submit(batch(step))
    assert transport.close(5.0)
    assert steps(receiver) == list(range(20))
    health = transport.health()
    assert health["points_exported"] == 20 * WIRE and health["requests_exported"] == 20
    assert health["points_failed"] == health["points_dropped"] == health["retries"] == 0
    # each request carries the sender's health as it was when the request was built
    carried = [metrics_of(r)["rltel/otlp/points_exported"] for r in receiver.requests]
    assert [m.sum.data_points[0].as_double for m in carried] == [k * WIRE for k in range(20)]
    points = {p.metric: p for p in transport.health_points()}
    assert points["rltel/otlp/points_exported"].value == 20 * WIRE
    assert isinstance(points["rltel/otlp/points_exported"], Counter)
    # each request carries the latencies since the previous one: every export counted once
    windows = [metrics_of(r)["rltel/otlp/export_latency"].histogram for r in receiver.requests]
    assert [w.data_points[0].count for w in windows] == [0] + [1] * 19
    latency = points["rltel/otlp/export_latency"]
    assert isinstance(latency, Histogram) and latency.count == 1  # the last request's
    assert 0 < latency.min <= latency.sum / latency.count <= latency.max < 2.0
    assert {p.metric: p for p in transport.health_points()}["rltel/otlp/export_latency"].count == 0


def test_large_batch_is_split_into_requests_under_the_limit(receiver):
    transport = Otlp(receiver.endpoint, max_points_per_request=50, **FAST)
    transport.submit(batch(0, n=470))
    assert transport.close(5.0)
    requests = receiver.requests
    room = 50 - 3  # the step gauges ride in every request
    assert len(requests) == math.ceil((470 + HEALTH_POINTS) / room) == 11
    assert all(point_count(r) <= 50 for r in requests)
    names = [n for r in requests for n in metrics_of(r) if not n.startswith(("train.", "rltel/"))]
    assert sorted(names) == sorted(f"g/{i}" for i in range(470))
    assert transport.health()["points_exported"] == 470 + HEALTH_POINTS


def test_retryable_codes_are_retried_permanent_ones_are_not(receiver):
    transport = Otlp(receiver.endpoint, **FAST)
    receiver.fail_with(grpc.StatusCode.UNAVAILABLE, 2)
    transport.submit(batch(0))
    assert receiver.wait_for(lambda r: len(r) == 1, 5.0)
    assert receiver.calls == 3 and transport.health()["retries"] == 2
    receiver.fail_with(grpc.StatusCode.INVALID_ARGUMENT, 1)
    transport.submit(batch(1, n=4))
    transport.submit(batch(2))
    assert transport.close(5.0)
    assert steps(receiver) == [0, 2] and receiver.calls == 5
    health = transport.health()
    assert health["points_failed"] == 4 + HEALTH_POINTS and health["retries"] == 2
    assert health["points_exported"] == 2 * WIRE


def test_retry_pushback_is_honoured(receiver):
    """RESOURCE_EXHAUSTED with ``grpc-retry-pushback-ms`` (the collector's "retry later"):
    the next attempt waits that long, not the queue's 10 ms backoff."""
    transport = Otlp(receiver.endpoint, **FAST)
    receiver.fail_with(grpc.StatusCode.RESOURCE_EXHAUSTED, 2, pushback_ms=300)
    transport.submit(batch(0))
    assert receiver.wait_for(lambda r: len(r) == 1, 5.0)
    first, second, third = receiver.call_times
    assert second - first >= 0.3 and third - second >= 0.3
    receiver.fail_with(grpc.StatusCode.UNAVAILABLE, 1)  # no pushback: the queue's backoff
    transport.submit(batch(1))
    assert transport.close(5.0)
    assert receiver.call_times[-1] - receiver.call_times[-2] < 0.25
    assert steps(receiver) == [0, 1] and transport.health()["retries"] == 3


def test_collector_down_then_up_every_step_once_in_order(tmp_path):
    receiver = Receiver()  # not started: the collector is down
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    transport = Otlp(receiver.endpoint, spool=spool, queue_size=8, **FAST)
    try:
        for step in range(60):
            # the worker spills past half full; paced by that, not by the clock (a burst
            # faster than the worker is counted dropped; commit's cost is export_bench's)
            transport.room(below=4)
            assert transport.submit(batch(step))
            if step == 40:
                health = transport.health()
                assert health["points_spooled"] > 0 and health["retries"] > 0
                receiver.start()
        assert receiver.wait_for(lambda r: len(r) == 60, 30.0)
        assert transport.close(5.0)
    finally:
        receiver.stop()
    assert steps(receiver) == list(range(60))
    health = transport.health()
    assert health["points_exported"] == 60 * WIRE and health["points_dropped"] == 0
    assert len(spool) == 0 and not list((tmp_path / "spool").glob("*.seg"))


def test_spool_limit_exceeded_drop_count_is_exact_and_the_rest_replays(tmp_path):
    down = Receiver()
    (wire,) = OtlpSink(down.endpoint).requests_left(batch(0))
    size = len(batch_to_json(wire).encode())
    spool = Spool(tmp_path, limit_bytes=5 * size + size // 2)  # room for 5 batches
    transport = Otlp(down.endpoint, spool=spool, **FAST)
    for step in range(12):
        transport.submit(batch(step))
    assert not transport.close(5.0)  # collector down: nothing delivered, all spooled or dropped
    health = transport.health()
    assert health["points_dropped"] == 7 * WIRE and health["points_spooled"] == 5 * WIRE
    assert health["points_exported"] == 0 and health["spool_points"] == 5 * WIRE

    with Receiver() as receiver:  # the next run replays the spool first, in order
        again = Otlp(receiver.endpoint, spool=Spool(tmp_path, 10**7), **FAST)
        again.submit(batch(100))
        assert again.close(5.0)
    assert steps(receiver) == [0, 1, 2, 3, 4, 100]


def test_without_spool_every_lost_point_is_counted():
    down = Receiver()
    transport = Otlp(down.endpoint, queue_size=4, **FAST)
    accepted = sum(transport.submit(batch(step)) for step in range(10))
    assert accepted < 10
    start = time.monotonic()
    assert not transport.close(0.3)
    assert time.monotonic() - start < 2.0
    health = transport.health()
    assert health["points_dropped"] == 10 * WIRE and health["points_exported"] == 0
    assert not transport.submit(batch(11))  # closed
    assert transport.health()["points_dropped"] == 11 * WIRE


def test_close_keeps_its_deadline_with_a_stalled_collector(tmp_path, receiver):
    receiver.stall_s = 3.0  # accepts, then answers long after the close deadline
    spool = Spool(tmp_path, limit_bytes=10**7)
    transport = Otlp(receiver.endpoint, spool=spool, **{**FAST, "timeout_s": 10.0})
    for step in range(3):
        transport.submit(batch(step))
    time.sleep(0.1)  # the first request is in flight
    start = time.monotonic()
    assert not transport.close(0.3)
    assert time.monotonic() - start < 2.0
    transport.settled()
    spooled = []
    while (head := spool.peek()) is not None:
        spooled.append(head.snapshot.step.global_step)
        spool.pop()
    assert spooled == [0, 1, 2]  # the cancelled request first, nothing lost
    assert transport.health()["points_dropped"] == 0


def test_headers_are_sent_and_never_logged(receiver, caplog):
    secret = "Bearer s3cr3t-token"
    caplog.set_level(logging.DEBUG)
    receiver.fail_with(grpc.StatusCode.PERMISSION_DENIED, 1)
    transport = Otlp(receiver.endpoint, headers={"authorization": secret}, **FAST)
    transport.submit(batch(0))
    transport.submit(batch(1))
    assert transport.close(5.0)
    assert receiver.metadata[-1]["authorization"] == secret
    assert "PERMISSION_DENIED" in caplog.text and secret not in caplog.text


def _hammer(transport: Otlp, stop: threading.Event) -> None:
    step = 1000
    while not stop.is_set() and step < 1300:
        transport.submit(batch(step))
        transport.health()
        step += 1


def test_forked_child_neither_deadlocks_nor_sends(receiver):
    transport = Otlp(receiver.endpoint, queue_size=100_000, **FAST)
    transport.submit(batch(0))
    assert receiver.wait_for(lambda r: len(r) == 1, 5.0)
    stop = threading.Event()
    hammer = threading.Thread(target=_hammer, args=(transport, stop))
    hammer.start()  # the transport lock is busy while we fork
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:  # child: must return at once, send nothing
            start = time.monotonic()
            refused = not transport.submit(batch(999))
            transport.queued.shutdown(1.0)
            os._exit(0 if refused and time.monotonic() - start < 0.5 else 1)
        children.append(pid)
    stop.set()
    hammer.join()
    deadline = time.monotonic() + 10
    for pid in children:
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        if done == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("forked child hung")
        assert os.waitstatus_to_exitcode(done[1]) == 0
    transport.submit(batch(1))
    assert transport.close(10.0)
    got = steps(receiver)
    assert 999 not in got and len(got) == len(set(got))
    assert got[0] == 0 and got[-1] == 1 and got[1:-1] == sorted(got[1:-1])


def _spooled_and_retried(transport: Otlp, points: int) -> bool:
    health = transport.health()
    return health["spool_points"] >= points and health["retries"] >= 3


def test_wrong_token_keeps_data_in_the_spool_and_a_fixed_token_replays_it(tmp_path, caplog):
    from collector.config import from_dict
    from collector.pipeline import Pipeline
    from collector.server import CollectorServer
    from exporters.base import InMemorySink
    from tests.distributed import free_port

    port, token = free_port(), tmp_path / "token"
    sinks: list[InMemorySink] = []  # one per collector: stopping one shuts its sink down

    def collector(expected: str) -> CollectorServer:
        token.write_text(expected + "\n")
        config = from_dict({"receiver": {"port": port}, "auth": {"token_file": str(token)}})
        sinks.append(InMemorySink())
        server = CollectorServer(config, Pipeline([sinks[-1]], None, config.limits))
        server.start()
        return server

    caplog.set_level(logging.WARNING, logger="exporters.otlp.transport")
    server = collector("rotated-token")  # the sender still has the old one
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    transport = Otlp(
        f"127.0.0.1:{port}",
        headers={"authorization": "Bearer old-token"},
        spool=spool,
        queue_size=8,
        **FAST,
    )
    try:
        for step in range(30):  # each with room in the queue: the worker spills at half full
            wait_until(lambda: transport.queued.depth() < 8, 60)
            assert transport.submit(batch(step))
        # Half a queue spills at once, and once failures last spill_after_s (2 s) whatever
        # waits in memory does: every request reaches the spool, its oldest retried.
        wait_until(lambda: _spooled_and_retried(transport, 30 * WIRE), 60)
        health = transport.health()
        assert health["spool_points"] == 30 * WIRE
        assert health["points_dropped"] == 0 and health["points_failed"] == 0
        errors = [r for r in caplog.records if "refused our credentials" in r.getMessage()]
        assert errors and all(r.levelno == logging.ERROR for r in errors)
        apart = [b.created - a.created for a, b in itertools.pairwise(errors)]
        assert all(gap >= 59.9 for gap in apart), apart  # at most one a minute
        assert "UNAUTHENTICATED" in errors[0].getMessage() and "old-token" not in caplog.text
        assert sinks[0].snapshots == []
        server.stop(5)
        server = collector("old-token")  # the operator puts the right token back
        wait_until(lambda: transport.health()["points_exported"] >= 30 * WIRE, 60)
        assert transport.close(30.0)
        assert server.pipeline.force_flush(5)
    finally:
        transport.close(1.0)
        server.stop(5)
    assert [s.step.global_step for s in sinks[1].snapshots] == list(range(30))  # all, in order
    health = transport.health()
    assert health["points_exported"] == 30 * WIRE and health["points_dropped"] == 0
    assert len(spool) == 0


def test_an_outage_and_a_run_of_refusals_are_each_logged_when_they_start_and_end(caplog):
    caplog.set_level(logging.INFO, logger="exporters.otlp")
    receiver = Receiver()  # down
    sender = OtlpSender(receiver.endpoint, timeout_s=2.0)
    request = Batch(batch(0), 0, 1, False)  # 3 points
    try:
        for _ in range(20):
            assert sender.send(request) is ExportResult.FAILURE
        with receiver:
            receiver.fail_with(grpc.StatusCode.INVALID_ARGUMENT, 5)
            for _ in range(5):
                assert sender.send(request) is ExportResult.PERMANENT_FAILURE
            assert sender.send(request) is ExportResult.SUCCESS
            assert sender.send(request) is ExportResult.SUCCESS
    finally:
        sender.close()
    endpoint = receiver.endpoint
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("exporters.otlp")]
    assert ours == [
        f"otlp: export to {endpoint} failed (UNAVAILABLE); retrying",
        "otlp: export rejected (INVALID_ARGUMENT); dropping 3 points "
        "(further drops counted in points_failed)",
        f"otlp: {endpoint} takes requests again after 20 failed attempts",
        f"otlp: {endpoint} takes requests again; 5 requests (15 points) were dropped before",
    ]
    assert sender.counts()["retries"] == 20 and sender.counts()["points_failed"] == 15
