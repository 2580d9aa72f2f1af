"""The collector's trace and logs services (collector/signal_service.py, collector/server.py): the
stock OpenTelemetry SDK's OTLP exporters send to a real collector on 127.0.0.1 and its
consumers get every span and record; refusals have the metrics service's status codes and
the collector keeps serving metrics after each; the counts are on /metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.config import from_dict
from collector.server import CollectorServer
from telemetry.otlp.samples import decode_samples
from tests.collector.conftest import samples, scrape
from tests.collector.test_server import gauges_request, status_of
from tests.collector.trace_checks import spans_of

TOKEN = "s3cret-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
CAP = 50  # spans or records per request
MAX_MESSAGE = 64 * 1024
METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}


class Recording:
    """A consumer standing for the downstream: keeps every request it is handed."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.lock = threading.Lock()

    def consume(self, request: ExportTraceServiceRequest | ExportLogsServiceRequest) -> None:
        with self.lock:
            if isinstance(request, ExportTraceServiceRequest):
                self.traces.append(request)
            else:
                self.logs.append(request)

    def flush(self) -> bool:
        return True

    def shutdown(self, timeout_s: float) -> None:
        del timeout_s

    def spans(self) -> list:
        with self.lock:
            return spans_of(self.traces)


@pytest.fixture
def collector(tmp_path) -> Iterator[tuple[CollectorServer, Recording]]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    config = from_dict(
        {
            "receiver": {"port": 0, "max_message_bytes": MAX_MESSAGE},
            "auth": {"token_file": str(token)},
            "limits": {"max_spans_per_request": CAP, "max_log_records_per_request": CAP},
            "sinks": {"prometheus": {"port": 0}, "fileroot": str(tmp_path / "runs")},
        }
    )
    consumer = Recording()
    server = CollectorServer(config, trace_consumers=[consumer], log_consumers=[consumer])
    server.start()
    try:
        yield server, consumer
    finally:
        server.stop(10)


def call(endpoint: str, method: str, body: bytes, metadata=AUTH) -> grpc.StatusCode:
    """One raw Export call; its status code."""
    with grpc.insecure_channel(endpoint) as channel:
        export = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            export(body, metadata=metadata, timeout=10)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def metrics_still_served(server: CollectorServer) -> bool:
    return status_of(server.endpoint, gauges_request(3), metadata=AUTH) is grpc.StatusCode.OK


def spans_request(n: int) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(n):
        span = scope.spans.add()
        span.name = f"s{i}"
        span.trace_id = bytes(16 * [1])
        span.span_id = (i + 1).to_bytes(8, "big")
    return request.SerializeToString()


def records_request(n: int) -> bytes:
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for i in range(n):
        scope.log_records.add().body.string_value = f"r{i}"
    return request.SerializeToString()


BODIES = {"traces": spans_request, "logs": records_request}


def test_stock_sdk_exporters_deliver_every_span_and_record(collector):
    server, consumer = collector
    resource = Resource({"service.name": "trainer", "rltel.experiment": "e"})
    tracer_provider = TracerProvider(resource=resource)
    span_exporter = OTLPSpanExporter(
        endpoint=server.endpoint, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}
    )
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tracer_provider.get_tracer("test")
    for step in range(20):
        with (
            tracer.start_as_current_span("step", attributes={"step": step}),
            tracer.start_as_current_span("generate"),  # a child of "step"
        ):
            pass
    logger_provider = LoggerProvider(resource=resource)
    log_exporter = OTLPLogExporter(
        endpoint=server.endpoint, insecure=True, headers={"authorization": f"Bearer {TOKEN}"}
    )
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    sdk_logger = logger_provider.get_logger("test")
    for step in range(12):  # an rltel sample, as the stock SDK writes one
        sdk_logger.emit(
            LogRecord(
                body={"prompt": f"p{step}", "completion": "c"},
                attributes={
                    "rltel.sample.stream": "rollout",
                    "train.step": step,
                    "rltel.sample.number.reward": float(step),
                },
                event_name="rltel.sample",
            )
        )
    tracer_provider.shutdown()
    logger_provider.shutdown()
    spans = consumer.spans()
    assert len(spans) == 40
    steps = sorted(
        kv.value.int_value for span in spans for kv in span.attributes if kv.key == "step"
    )
    assert steps == list(range(20))
    assert sorted(span.name for span in spans) == ["generate"] * 20 + ["step"] * 20
    received = [got for request in consumer.logs for got in decode_samples(request)]
    assert [(got.step, got.sample.fields()) for got in received] == [
        (step, {"prompt": f"p{step}", "completion": "c", "reward": float(step)})
        for step in range(12)
    ]
    assert ("rltel.experiment", "e") in received[0].resource
    scraped = scrape(server.metrics_url)
    name = "rltel_collector_signal_items_accepted_total"
    assert samples(scraped, name, signal="traces") == {(("signal", "traces"),): 40.0}
    assert samples(scraped, name, signal="logs") == {(("signal", "logs"),): 12.0}


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_refusals_have_their_status_and_metrics_keep_being_served(collector, signal):
    server, consumer = collector
    method, body = METHODS[signal], BODIES[signal]
    assert call(server.endpoint, method, body(CAP)) is grpc.StatusCode.OK  # at the cap
    cases = {
        "malformed": (b"\xff\xff\xff", AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        "over the cap": (body(CAP + 1), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        "over max_message_bytes": (
            body(1) + b"\x0a\x00" * MAX_MESSAGE,  # empty repeated fields: valid, too large
            AUTH,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        "no token": (body(1), (), grpc.StatusCode.UNAUTHENTICATED),
        "wrong token": (
            body(1),
            (("authorization", "Bearer wrong"),),
            grpc.StatusCode.UNAUTHENTICATED,
        ),
    }
    for case, (data, metadata, code) in cases.items():
        assert call(server.endpoint, method, data, metadata) is code, case
        assert metrics_still_served(server), f"metrics not served after {case}"
    assert call(server.endpoint, method, body(2)) is grpc.StatusCode.OK  # and still served
    kept = consumer.spans() if signal == "traces" else consumer.logs
    expected = CAP + 2 if signal == "traces" else 2
    assert len(kept) == expected  # nothing of a refused request reached the consumer
    scraped = scrape(server.metrics_url)
    by_code = {
        dict(labels)["code"]: value
        for labels, value in samples(
            scraped, "rltel_collector_signal_requests_total", signal=signal
        ).items()
    }
    # gRPC refuses an oversized message before the handler: it is no request of ours
    assert by_code == {"OK": 2.0, "INVALID_ARGUMENT": 2.0, "UNAUTHENTICATED": 2.0}
    refused = samples(scraped, "rltel_collector_signal_items_refused_total", signal=signal)
    assert list(refused.values()) == [float(CAP + 1)]


@pytest.mark.parametrize("signal", ["traces", "logs"])
def test_a_request_without_time_left_is_refused_with_deadline_exceeded(tmp_path, signal):
    """The gate's deadline check: less than ``deadline_margin_s`` left, nothing kept."""
    consumer = Recording()
    config = from_dict(
        {
            "receiver": {"port": 0},
            "limits": {"deadline_margin_s": 30.0},  # more than the call's 10 s
            "sinks": {"prometheus": {"enabled": False}, "fileroot": str(tmp_path)},
        }
    )
    server = CollectorServer(config, trace_consumers=[consumer], log_consumers=[consumer])
    server.start()
    try:
        code = call(server.endpoint, METHODS[signal], BODIES[signal](3), metadata=())
    finally:
        server.stop(10)
    assert code is grpc.StatusCode.DEADLINE_EXCEEDED
    service = {s.kind.name: s for s in server.signals}[signal]
    assert service.counts().requests == {"DEADLINE_EXCEEDED": 1}  # the collector answered
    assert consumer.traces == [] and consumer.logs == []
