"""Traces and logs through the OTLP sink (exporters/otlp/signal_requests.py, sink, spool,
transport): spans from ``OtlpSink.span_exporter()`` and a snapshot's samples share the queue
and the spool with metrics, reach ``TraceService/Export`` and ``LogsService/Export`` on a real
gRPC server on 127.0.0.1, in order, through an outage, and every span not delivered is
counted."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs_pb
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from exporters.otlp.signal_requests import SignalRequest
from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
from exporters.otlp.spool import Spool, batch_to_json
from exporters.queued import QueuedSink
from telemetry.model.sample import TRUNCATION_MARK, Sample
from telemetry.model.snapshot import ScalarMean, Snapshot, Step
from telemetry.otlp.encode import Batch
from telemetry.otlp.samples import decode_samples
from tests.distributed import free_port

from .spooled import held, kind

WAIT_S = 60.0
FAST = {"backoff_s": 0.02, "max_backoff_s": 0.1, "timeout_s": 2.0}
SERVICES = {
    "opentelemetry.proto.collector.metrics.v1.MetricsService": (
        "metrics",
        metrics_pb.ExportMetricsServiceRequest,
        metrics_pb.ExportMetricsServiceResponse,
    ),
    "opentelemetry.proto.collector.trace.v1.TraceService": (
        "traces",
        trace_pb.ExportTraceServiceRequest,
        trace_pb.ExportTraceServiceResponse,
    ),
    "opentelemetry.proto.collector.logs.v1.LogsService": (
        "logs",
        logs_pb.ExportLogsServiceRequest,
        logs_pb.ExportLogsServiceResponse,
    ),
}


class Receiver:
    """A real OTLP/gRPC server of the three services; records (signal, request) in order."""

    def __init__(self, port: int) -> None:
        self.endpoint = f"127.0.0.1:{port}"
        self.requests: list[tuple[str, object]] = []
        self.times: list[tuple[str, float]] = []  # (signal, monotonic time) of every call
        self.refuse: dict[str, tuple[grpc.StatusCode, int]] = {}  # the next call's of a signal
        self.cond = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        for service, (signal, request, response) in SERVICES.items():
            handler = grpc.unary_unary_rpc_method_handler(
                self._recorder(signal, response),
                request_deserializer=request.FromString,
                response_serializer=response.SerializeToString,
            )
            self.server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service, {"Export": handler}),)
            )
        assert self.server.add_insecure_port(self.endpoint) == port

    def _recorder(self, signal, response):
        def export(request, context):
            with self.cond:
                self.times.append((signal, time.monotonic()))
                if signal in self.refuse:
                    code, pushback_ms = self.refuse.pop(signal)
                    context.set_trailing_metadata((("grpc-retry-pushback-ms", str(pushback_ms)),))
                    context.abort(code, "refused by the test")
                self.requests.append((signal, request))
                self.cond.notify_all()
            return response()

        return export

    def wait_for(self, n: int) -> list[tuple[str, object]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.requests) >= n, WAIT_S), self.requests
            return list(self.requests)


def snapshot(step: int) -> Snapshot:
    sample = Sample(
        "rollout",
        text=(("prompt", f"p{step}"), ("completion", "c" + TRUNCATION_MARK)),
        numbers=(("reward", float(step)),),
        truncated=("completion",),
    )
    return Snapshot(
        (ScalarMean("g", float(step), count=1),),
        Step(0, step, step),
        (("rltel.role", "trainer"),),
        1_000 + step,
        samples=(sample,),
    )


def step_of(request: metrics_pb.ExportMetricsServiceRequest) -> int:
    for metric in request.resource_metrics[0].scope_metrics[0].metrics:
        if metric.name == "train.step":
            return metric.gauge.data_points[0].as_int
    raise AssertionError("no train.step gauge")


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def tracer_of():
    providers: list[TracerProvider] = []

    def make(sink: OtlpSink):
        provider = TracerProvider(resource=Resource({"service.name": "trainer"}))
        provider.add_span_processor(SimpleSpanProcessor(sink.span_exporter()))
        providers.append(provider)
        return provider.get_tracer("test")

    yield make
    for provider in providers:
        provider.shutdown()


def test_spans_and_samples_ride_the_spool_through_an_outage_in_order(tmp_path, tracer_of):
    port = free_port()
    spool = Spool(tmp_path / "spool", 1 << 24)
    sink = OtlpSink(f"127.0.0.1:{port}", spool=spool, **FAST)
    queued = QueuedSink.of(sink)
    tracer = tracer_of(sink)
    steps = 5
    try:
        for step in range(steps):  # the receiver is down: everything goes to the spool
            queued.submit(snapshot(step))
            with tracer.start_as_current_span(f"step-{step}", attributes={"step": step}):
                pass
        wait_until(lambda: len(spool) == 3 * steps and queued.depth() == 0, "not spooled")
        assert [kind(part) for part in held(spool.directory)] == [
            count for _ in range(steps) for count in (f"{1 + HEALTH_POINTS}", "1.logs", "1.traces")
        ]  # a metric request (its point and the health points), its samples, the span
        receiver = Receiver(port)
        receiver.server.start()
        try:
            got = receiver.wait_for(3 * steps)
            assert queued.force_flush(WAIT_S)
        finally:
            receiver.server.stop(None)
    finally:
        queued.shutdown(10)
    assert [signal for signal, _ in got] == ["metrics", "logs", "traces"] * steps
    for step in range(steps):
        metrics, logs, traces = (request for _, request in got[3 * step : 3 * step + 3])
        assert step_of(metrics) == step
        (received,) = decode_samples(logs)
        assert received.step == step and received.sample == snapshot(step).samples[0]
        (span,) = traces.resource_spans[0].scope_spans[0].spans
        assert span.name == f"step-{step}"
    health = sink.health()
    assert health["spans_exported"] == health["log_records_exported"] == steps
    assert health["spans_dropped"] == health["log_records_dropped"] == 0
    assert len(spool) == 0 and health["points_dropped"] == 0


def test_every_span_batch_the_endpoint_never_took_is_counted(tmp_path):
    """No spool, nobody listening: refused by the full queue or given up, each span counts."""
    sink = OtlpSink(f"127.0.0.1:{free_port()}", queue_size=2, **FAST)
    queued = QueuedSink.of(sink)
    exporter = sink.span_exporter()
    provider = TracerProvider()
    spans = []
    provider.add_span_processor(SimpleSpanProcessor(_Keep(spans)))
    tracer = provider.get_tracer("test")
    for i in range(20):
        with tracer.start_as_current_span(f"s{i}"):
            pass
    results = [exporter.export(spans[i : i + 2]) for i in range(0, 20, 2)]
    assert SpanExportResult.FAILURE in results  # the queue of 2 filled up: refused at once
    queued.shutdown(5)
    assert sink.health()["spans_dropped"] == 20
    assert sink.health()["spans_exported"] == 0
    assert exporter.export(spans[:1]) is SpanExportResult.FAILURE  # the sink is shut down
    provider.shutdown()


class _Keep:
    """A span exporter that keeps the finished spans (to hand them to the one under test)."""

    def __init__(self, into: list) -> None:
        self.into = into

    def export(self, spans):
        self.into.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def test_a_spool_of_the_earlier_format_is_read_and_signal_entries_keep_their_place(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir()
    old = Batch(snapshot(0), 5, 1, False)
    (directory / "000000000000-1.json").write_text(batch_to_json(old))  # format 1, as before
    spool = Spool(directory, 1 << 20)
    traces = SignalRequest("traces", trace_pb.ExportTraceServiceRequest(), 3)
    assert spool.append(traces)
    assert spool.append(Batch(snapshot(1)))
    (directory / "000000000009-4.metrics2.json").write_text("{}")  # unknown kind: left alone
    reopened = Spool(directory, 1 << 20)
    assert len(reopened) == 3 and reopened.points == 2
    first = reopened.peek()
    assert isinstance(first, Batch) and first.snapshot.step.global_step == 0
    assert first.window_start_unix_nano == 5
    reopened.pop()
    second = reopened.peek()
    assert isinstance(second, SignalRequest) and second.signal == "traces" and second.items == 3
    reopened.pop()
    assert reopened.peek().snapshot.step.global_step == 1
    reopened.pop()
    assert reopened.peek() is None
    assert (directory / "000000000009-4.metrics2.json").exists()


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_a_refused_signal_request_waits_for_the_pushback_then_goes_through(tmp_path, signal):
    port = free_port()
    receiver = Receiver(port)
    receiver.refuse = {signal: (grpc.StatusCode.RESOURCE_EXHAUSTED, 400)}
    receiver.server.start()
    sink = OtlpSink(f"127.0.0.1:{port}", spool=Spool(tmp_path / "spool", 1 << 20), **FAST)
    queued = QueuedSink.of(sink)
    try:
        if signal == "traces":
            request = trace_pb.ExportTraceServiceRequest()
            request.resource_spans.add().scope_spans.add().spans.add(name="s")
            assert queued.submit(SignalRequest("traces", request, 1))
        else:
            assert queued.submit(snapshot(3))  # its metrics, then its samples
        got = receiver.wait_for(1 if signal == "traces" else 2)
        assert queued.force_flush(WAIT_S)
    finally:
        queued.shutdown(10)
        receiver.server.stop(None)
    assert [kind for kind, _ in got] == (["traces"] if signal == "traces" else ["metrics", "logs"])
    calls = [at for kind, at in receiver.times if kind == signal]
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.4  # the delay the receiver asked for
    assert sink.health()["retries"] == 1


def test_rltel_spool_flush_sends_trace_and_logs_entries_in_order(tmp_path):
    """A spool left by a run (metrics, samples, spans) goes out with ``flush_spools``."""
    from exporters.otlp.flush import flush_spools
    from telemetry.config import OtlpConfig

    port = free_port()
    spool = Spool(tmp_path / "spool", 1 << 20)
    sink = OtlpSink(f"127.0.0.1:{port}", spool=spool, **FAST)
    queued = QueuedSink.of(sink)
    request = trace_pb.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(name="left")
    queued.submit(snapshot(1))
    queued.submit(SignalRequest("traces", request, 1))
    queued.shutdown(0.5)  # nobody listens: all of it stays in the spool
    assert len(Spool(tmp_path / "spool", 1 << 20)) == 3
    receiver = Receiver(port)
    receiver.server.start()
    try:
        report = flush_spools(tmp_path / "spool", OtlpConfig(endpoint=f"127.0.0.1:{port}"))
    finally:
        receiver.server.stop(None)
    assert report.complete and report.delivered_requests == 3
    assert [kind for kind, _ in receiver.requests] == ["metrics", "logs", "traces"]


def test_an_endpoint_without_a_logs_service_costs_the_samples_only_and_logs_once(caplog):
    """A metrics-only receiver (an older collector) answers UNIMPLEMENTED to the samples:
    they are dropped and counted, the metrics all arrive, and one line says so."""
    from tests.telemetry.otlp_receiver import Receiver as MetricsOnly

    receiver = MetricsOnly().start()
    sink = OtlpSink(receiver.endpoint, **FAST)
    queued = QueuedSink.of(sink)
    steps = 8
    try:
        for step in range(steps):
            assert queued.submit(snapshot(step))
        assert queued.force_flush(WAIT_S)
    finally:
        queued.shutdown(10)
        receiver.stop()
    assert [step_of(request) for request in receiver.requests] == list(range(steps))
    health = sink.health()
    assert health["log_records_failed"] == steps and health["log_records_exported"] == 0
    assert health["points_failed"] == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "exporters.otlp.transport"]
    assert len(lines) == 1, lines
    assert "UNIMPLEMENTED" in lines[0] and "1 log records" in lines[0]


def test_samples_and_spans_that_find_no_room_are_counted(tmp_path):
    """A full spool refuses a trace request (its spans counted); without a spool and with
    nobody listening, each snapshot's samples are counted as they are given up."""
    spool = Spool(tmp_path / "spool", 200)
    request = trace_pb.ExportTraceServiceRequest()
    for i in range(20):
        request.resource_spans.add().scope_spans.add().spans.add(name=f"span-{i}")
    assert not spool.append(SignalRequest("traces", request, 20))  # over 200 bytes
    assert spool.dropped_items == {"traces": 20, "logs": 0} and len(spool) == 0
    sink = OtlpSink(f"127.0.0.1:{free_port()}", queue_size=4, **FAST)
    queued = QueuedSink.of(sink)
    for step in range(6):
        queued.submit(snapshot(step))  # one sample each
    queued.shutdown(2)
    health = sink.health()
    assert health["log_records_dropped"] == 6 and health["log_records_exported"] == 0
