"""Forwarding trace requests to a second, real OTLP/gRPC trace receiver on 127.0.0.1: every
request once and in order through refusals, pushback honoured, a full queue counted."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client import CollectorRegistry

from collector.traces import CURRENT, TraceForwarder, TraceMerge
from collector.traces.config import TraceForwardConfig, TracesConfig
from collector.traces.metrics import TraceMetrics
from telemetry.otlp.wire import PUSHBACK_KEY
from tests.collector.trace_checks import (
    Requests,
    check_format,
    check_nested_ordered,
    load,
    provider,
    record_steps,
)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class Receiver:
    """A TraceService that refuses the first ``refuse`` calls with ``code`` (and a pushback
    of ``pushback_ms``), then keeps every request it accepts."""

    def __init__(self, refuse: int = 0, code=grpc.StatusCode.UNAVAILABLE, pushback_ms=None):
        self.refuse, self.code, self.pushback_ms = refuse, code, pushback_ms
        self.calls = 0
        self.kept: list[ExportTraceServiceRequest] = []
        self.metadata: list[dict] = []
        self.times: list[float] = []
        self.cond = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._export,
            request_deserializer=ExportTraceServiceRequest.FromString,
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, request, context):
        with self.cond:
            self.calls += 1
            self.times.append(time.monotonic())
            self.cond.notify_all()
            if self.calls <= self.refuse:
                if self.pushback_ms is not None:
                    context.set_trailing_metadata(((PUSHBACK_KEY, str(self.pushback_ms)),))
                context.abort(self.code, "not now")
            self.kept.append(request)
            self.metadata.append(dict(context.invocation_metadata()))
        return ExportTraceServiceResponse()


@pytest.fixture
def receiver_of():
    made = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.server.stop(None)


def requests(steps: int = 2) -> list[ExportTraceServiceRequest]:
    made = Requests()
    record_steps(provider(made, "trainer", 0), range(steps))
    return made.requests


def test_every_request_reaches_the_receiver_once_in_order(tmp_path, receiver_of):
    receiver = receiver_of()
    config = TracesConfig(
        forward=TraceForwardConfig(
            endpoint=f"127.0.0.1:{receiver.port}", headers={"authorization": "Bearer t"}
        )
    )
    merge = TraceMerge(config, lambda e, t: tmp_path / e / t)
    sent = requests()
    for request in sent:
        merge.consume(request)
    merge.shutdown(30)
    assert receiver.kept == sent
    assert all(m.get("authorization") == "Bearer t" for m in receiver.metadata)
    stats = merge.stats().forward
    assert (stats.sent, stats.dropped, stats.failed, stats.queued) == (len(sent), 0, 0, 0)
    registry = CollectorRegistry()
    registry.register(TraceMetrics(merge))
    get = registry.get_sample_value
    name = "rltel_collector_trace_forward_requests_total"
    assert get(name, {"outcome": "sent"}) == len(sent) and get(name, {"outcome": "dropped"}) == 0
    assert get("rltel_collector_trace_forward_queued") == 0


def test_retryable_refusals_are_retried_with_the_pushback_asked_for(receiver_of):
    receiver = receiver_of(refuse=2, pushback_ms=300)
    config = TraceForwardConfig(endpoint=f"127.0.0.1:{receiver.port}", backoff_s=0.01)
    forwarder = TraceForwarder(config)
    sent = requests(1)
    for request in sent:
        assert forwarder.submit(request.SerializeToString())
    assert forwarder.flush(30)
    forwarder.close(5)
    assert receiver.kept == sent and receiver.calls == len(sent) + 2
    gaps = [b - a for a, b in zip(receiver.times, receiver.times[1:3], strict=False)]
    assert all(gap >= 0.3 for gap in gaps), gaps  # the receiver's delay, not 10 ms
    stats = forwarder.stats()
    assert (stats.sent, stats.retried, stats.failed) == (len(sent), 2, 0)


def test_a_permanent_refusal_is_dropped_and_counted(receiver_of):
    receiver = receiver_of(refuse=1, code=grpc.StatusCode.INVALID_ARGUMENT)
    forwarder = TraceForwarder(TraceForwardConfig(endpoint=f"127.0.0.1:{receiver.port}"))
    sent = requests(1)[:2]
    for request in sent:
        forwarder.submit(request.SerializeToString())
    assert forwarder.flush(30)
    forwarder.close(5)
    assert receiver.kept == sent[1:] and receiver.calls == 2
    stats = forwarder.stats()
    assert (stats.sent, stats.failed, stats.retried) == (1, 1, 0)


def test_a_full_queue_drops_and_counts_never_blocks(receiver_of):
    receiver = receiver_of(refuse=10**6)  # never accepts: the first request stays in flight
    config = TraceForwardConfig(
        endpoint=f"127.0.0.1:{receiver.port}", queue_size=2, max_retries=1000, backoff_s=0.05
    )
    forwarder = TraceForwarder(config)
    body = requests(1)[0].SerializeToString()
    with receiver.cond:  # the worker took the first request once the receiver saw it
        forwarder.submit(body)
        assert receiver.cond.wait_for(lambda: receiver.calls >= 1, 30)
    kept = [forwarder.submit(body) for _ in range(5)]
    assert kept == [True, True, False, False, False]
    forwarder.close(0.2)
    stats = forwarder.stats()
    # The queue tries what it holds until the close deadline: each request is given up
    # (failed) or left queued (dropped), and the three refused at submit were dropped.
    assert (stats.sent, stats.queued) == (0, 0)
    assert stats.failed >= 1 and stats.dropped >= 3 and stats.failed + stats.dropped == 6


def test_one_collector_forwards_to_another_whose_timeline_has_every_span(start_collector, tmp_path):
    """Collector A (its own timeline) forwards to collector B, a real OTLP trace endpoint:
    B's merged file holds every span the stock SDK exporter sent to A, once."""
    second = start_collector(sinks={"fileroot": str(tmp_path / "b")})
    first = start_collector(
        sinks={"fileroot": str(tmp_path / "a")},
        traces={"forward": {"endpoint": second.endpoint}},
    )
    sdk = provider(OTLPSpanExporter(endpoint=first.endpoint, insecure=True), "trainer", 0)
    sent = record_steps(sdk, range(3))
    sdk.shutdown()
    first.stop(30)  # its forward queue drained into the second
    second.stop(30)
    for root in ("a", "b"):
        events = check_format(load(tmp_path / root / "exp" / "t1" / CURRENT))
        check_nested_ordered(events)
        ids = [e["args"]["span_id"] for e in events if e["ph"] == "X"]
        assert len(ids) == len(set(ids)) == sent, root
