"""The overload bench's load generator: tagged OTLP requests and each phase's gRPC clients.

It runs in its own process (:func:`load_generator`), so the collector's RSS and CPU time are
the bench process's own. Every request carries the gauge ``bench/request_seq{client}`` (its
number) and the delta sum ``bench/points_sent`` (its data points), so the collector side
can check that each OK'd request reached the sinks exactly once, with exactly its points.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable
from multiprocessing.connection import Connection

import grpc
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.server import PUSHBACK_KEY, SERVICE
from telemetry.model.snapshot import Gauge, Snapshot
from telemetry.otlp.decode import Decoder
from telemetry.otlp.encode import encode

METHOD = f"/{SERVICE}/Export"
TAG, SENT = "bench/request_seq", "bench/points_sent"
PROBE_RESOURCE = (("service.name", "probe"),)
DELTA = 1


class Tagged:
    """One client's requests: a fixed body of ``points`` data points, two of them tagging it.

    The last two metrics are the gauge ``bench/request_seq{client}`` (the request's number)
    and the monotonic delta sum ``bench/points_sent`` (the request's data points).
    """

    def __init__(self, client: str, points: int) -> None:
        from collector_bench import training_request

        if points >= 1000:  # a trainer export: histograms, scalars, gauges, counters, step
            base = training_request(1, points - 2)
        else:
            gauges = tuple(Gauge(f"probe/g{i}", float(i)) for i in range(points - 2))
            snapshot = Snapshot(gauges, None, PROBE_RESOURCE, time.time_ns())
            (data,) = encode(snapshot, max_points=points)
            base = encode_metrics(data).SerializeToString()
        self.request = ExportMetricsServiceRequest.FromString(base)
        metrics = self.request.resource_metrics[0].scope_metrics[0].metrics
        now = time.time_ns()
        tag = metrics.add(name=TAG).gauge.data_points.add(time_unix_nano=now)
        attribute = tag.attributes.add(key="client")
        attribute.value.string_value = client
        sent = metrics.add(name=SENT).sum
        sent.is_monotonic, sent.aggregation_temporality = True, DELTA
        self._seq = tag
        count = sent.data_points.add(start_time_unix_nano=now - 1, time_unix_nano=now)
        self.points = Decoder().read(self.request).points
        count.as_double = self.points
        # the step gauges become the decoded snapshot's step, not points
        self.sink_points = self.points - (3 if points >= 1000 else 0)
        self.client = client

    def body(self, seq: int) -> bytes:
        """The serialized request numbered ``seq``."""
        self._seq.as_double = float(seq)
        return self.request.SerializeToString()


def _outcome(error: grpc.RpcError | None) -> str:
    if error is None:
        return "OK"
    pushback = PUSHBACK_KEY in dict(error.trailing_metadata() or ())
    return f"{error.code().name}{'+pushback' if pushback else ''}"


class Results:
    """What one phase's clients saw: OK'd requests, outcomes, latencies (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: list[tuple[str, int, int, int]] = []  # client, seq, points, sink points
        self.outcomes: Tally[str] = Tally()
        self.latency_ok: list[float] = []
        self.latency_all: list[float] = []
        self.sent_points = 0
        self.late = 0  # open-loop sends delayed by the per-client in-flight cap

    def record(
        self, req: Tagged, seq: int, error: grpc.RpcError | None, latency: float, probe: bool
    ) -> None:
        """Count one answer; a probe's latency is kept too."""
        outcome = _outcome(error)
        with self.lock:
            self.outcomes[outcome] += 1
            if outcome == "OK":
                self.ok.append((req.client, seq, req.points, req.sink_points))
            if probe:
                self.latency_all.append(latency)
                if outcome == "OK":
                    self.latency_ok.append(latency)

    def summary(self, start: float, end: float) -> dict:
        """Everything recorded, the phase's window and this process's CPU time, as plain data."""
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "ok": self.ok,
            "outcomes": dict(self.outcomes),
            "latency_ok": self.latency_ok,
            "latency_all": self.latency_all,
            "sent_points": self.sent_points,
            "late": self.late,
            "start": start,
            "end": end,
            "cpu": cpu.ru_utime + cpu.ru_stime,
        }


def _call(
    stub: grpc.UnaryUnaryMultiCallable, req: Tagged, seq: int, results: Results, probe: bool
) -> grpc.RpcError | None:
    body = req.body(seq)
    with results.lock:
        results.sent_points += req.points
    start = time.monotonic()
    try:
        stub(body, timeout=10)
        error = None
    except grpc.RpcError as err:
        error = err
    results.record(req, seq, error, time.monotonic() - start, probe)
    return error


def _stub(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)


def _probe(
    endpoint: str, req: Tagged, interval: float, more: Callable[[int], bool], results: Results
) -> None:
    """The small export, one call at a time, ``interval`` apart, while ``more(seq)``."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = _stub(channel)
        grpc.channel_ready_future(channel).result(timeout=10)
        seq = 0
        while more(seq):
            _call(stub, req, seq, results, True)
            seq += 1
            time.sleep(interval)


def baseline(endpoint: str, probe_points: int, calls: int) -> dict:
    """The 100-point export alone, ``calls`` times, 10 ms apart."""
    results = Results()
    start = time.monotonic()
    _probe(endpoint, Tagged("probe", probe_points), 0.01, lambda seq: seq < calls, results)
    return results.summary(start, time.monotonic())


def calibrate(endpoint: str, points: int, clients: int, seconds: float) -> dict:
    """Closed-loop senders that wait the pushback when refused: the sustainable rate.

    Each sender first sends one warm-up request (new series in the decoder and the
    Prometheus store); the collector process drains them before the timed part starts.
    """
    results, warm = Results(), Results()
    requests = [Tagged(f"cal{i}", points) for i in range(clients)]
    channels = [grpc.insecure_channel(endpoint) for _ in requests]
    for req, channel in zip(requests, channels, strict=True):
        _call(_stub(channel), req, -1, warm, False)
    time.sleep(1.0)  # the sinks apply the warm-up requests
    return_value = {"warm": warm.ok}
    start = time.monotonic()
    end = start + seconds

    def sender(req: Tagged, channel: grpc.Channel) -> None:
        stub, seq = _stub(channel), 0
        while time.monotonic() < end:
            error = _call(stub, req, seq, results, False)
            seq += 1
            if error is not None:
                pushback = dict(error.trailing_metadata() or ()).get(PUSHBACK_KEY, "100")
                time.sleep(int(pushback) / 1000)

    threads = [
        threading.Thread(target=sender, args=pair) for pair in zip(requests, channels, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for channel in channels:
        channel.close()
    return {**results.summary(start, time.monotonic()), **return_value}


def overload(
    endpoint: str,
    points: int,
    clients: int,
    rate: float,
    seconds: float,
    probe_points: int,
    probe_hz: float,
    max_in_flight: int,
) -> dict:
    """``clients`` open-loop senders offering ``rate`` points/s in all, plus the probe."""
    results, probe_results = Results(), Results()
    requests = [Tagged(f"flood{i}", points) for i in range(clients)]
    interval = clients * requests[0].points / rate  # seconds between one client's sends
    start = time.monotonic() + 0.5
    end = start + seconds

    def sender(i: int, req: Tagged) -> None:
        slots = threading.BoundedSemaphore(max_in_flight)
        with grpc.insecure_channel(endpoint) as channel:
            stub, seq = _stub(channel), 0
            grpc.channel_ready_future(channel).result(timeout=10)
            while True:
                due = start + (seq + i / clients) * interval
                if due >= end:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
                if not slots.acquire(blocking=False):
                    with results.lock:
                        results.late += 1
                    if not slots.acquire(timeout=max(0.0, end - time.monotonic())):
                        break
                body = req.body(seq)
                with results.lock:
                    results.sent_points += req.points
                sent = time.monotonic()
                future = stub.future(body, timeout=10)

                def done(f, seq=seq, sent=sent) -> None:
                    error = f.exception()
                    results.record(req, seq, error, time.monotonic() - sent, False)
                    slots.release()

                future.add_done_callback(done)
                seq += 1
            for _ in range(max_in_flight):  # every answer in
                slots.acquire(timeout=30)

    threads = [threading.Thread(target=sender, args=(i, r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, start - time.monotonic()))
    probe = Tagged("probe-flood", probe_points)
    pending: list[grpc.Future] = []
    with grpc.insecure_channel(endpoint) as channel:  # open loop too: one every 1/probe_hz
        stub, seq = _stub(channel), 0
        grpc.channel_ready_future(channel).result(timeout=10)
        while (due := start + seq / probe_hz) < end:
            time.sleep(max(0.0, due - time.monotonic()))
            body = probe.body(seq)
            with probe_results.lock:
                probe_results.sent_points += probe.points
            sent = time.monotonic()
            future = stub.future(body, timeout=10)

            def done(f, seq=seq, sent=sent) -> None:
                latency = time.monotonic() - sent
                probe_results.record(probe, seq, f.exception(), latency, True)

            future.add_done_callback(done)
            pending.append(future)
            seq += 1
        for future in pending:
            future.exception(timeout=30)
        time.sleep(0.1)  # the last callbacks
    for thread in threads:
        thread.join()
    summary = results.summary(start, end)
    summary["probe"] = probe_results.summary(start, end)
    return summary


PHASES = {"baseline": baseline, "calibrate": calibrate, "overload": overload}


def load_generator(conn: Connection) -> None:
    """The client process: runs the phases the collector process asks for."""
    while True:
        message = conn.recv()
        if message is None:
            return
        name, kwargs = message
        conn.send(PHASES[name](**kwargs))
