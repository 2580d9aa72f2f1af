"""The collector's gRPC receiver against real clients: the OTel SDK and raw gRPC calls."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from collector.config import from_dict
from collector.pipeline import Pipeline
from collector.server import SERVICE, CollectorServer
from exporters.base import ExportResult, InMemorySink
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.encode import encode

from .conftest import samples, scrape

METHOD = f"/{SERVICE}/Export"
SDK_BOUNDS = (0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000)
RUN = (("rltel.experiment", "e"), ("rltel.trial", "t"), ("service.name", "test"))


def export_raw(endpoint: str, body: bytes, metadata=(), credentials=None, timeout=10.0):
    """One Export call with a raw body; returns the response or raises grpc.RpcError."""
    channel = (
        grpc.secure_channel(endpoint, credentials)
        if credentials
        else grpc.insecure_channel(endpoint)
    )
    with channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=None,
            response_deserializer=ExportMetricsServiceResponse.FromString,
        )
        return call(body, metadata=metadata, timeout=timeout)


def status_of(endpoint: str, body: bytes, **kwargs) -> grpc.StatusCode:
    try:
        export_raw(endpoint, body, **kwargs)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def gauges_request(n: int, step: int = 1, value: float = 1.0) -> bytes:
    points = tuple(Gauge(f"g/k{i}", value + i) for i in range(n))
    (data,) = encode(Snapshot(points, Step(0, step, step), RUN, time.time_ns()), max_points=n + 3)
    return encode_metrics(data).SerializeToString()


def sdk_provider(endpoint: str, temporality: AggregationTemporality, name: str, headers=None):
    exporter = OTLPMetricExporter(
        endpoint=endpoint,
        insecure=True,
        headers=headers,
        preferred_temporality={Counter: temporality, Histogram: temporality},
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    return MeterProvider(metric_readers=[reader], resource=Resource({"service.name": name}))


def test_otel_sdk_clients_cumulative_and_delta_appear_on_metrics(start_collector):
    server = start_collector()
    rng = np.random.default_rng(7)
    expected = {}
    for name, temporality in (
        ("cum", AggregationTemporality.CUMULATIVE),
        ("delta", AggregationTemporality.DELTA),
    ):
        provider = sdk_provider(server.endpoint, temporality, name)
        meter = provider.get_meter("test")
        tokens = meter.create_counter("tokens", unit="{token}")
        depth = meter.create_up_down_counter("queue.depth")
        latency = meter.create_histogram("latency", unit="s")
        meter.create_observable_gauge(
            "temperature", callbacks=[lambda _o: [Observation(21.5, {"room": "a"})]]
        )
        adds, moves = rng.integers(1, 100, 20), rng.integers(-5, 10, 20)
        values = [rng.uniform(0, 300, 40), rng.uniform(0, 30, 25)]
        for window in (0, 1):
            for a in adds[window * 10 : (window + 1) * 10]:
                tokens.add(int(a), {"kind": "prompt"})
            for m in moves[window * 10 : (window + 1) * 10]:
                depth.add(int(m))
            for v in values[window]:
                latency.record(float(v))
            assert provider.force_flush(10_000)
        provider.shutdown()
        expected[name] = (adds.sum(), moves.sum(), np.concatenate(values), values[1])
    assert server.pipeline.force_flush()
    scraped = scrape(server.metrics_url)
    for name, (added, moved, every, last) in expected.items():
        job = {"job": name}
        assert samples(scraped, "tokens_total", kind="prompt", **job) == {
            (("instance", "unknown"), ("job", name), ("kind", "prompt")): float(added)
        }
        assert list(samples(scraped, "queue_depth", **job).values()) == [float(moved)]
        assert list(samples(scraped, "temperature", room="a", **job).values()) == [21.5]
        assert list(samples(scraped, "latency_seconds_count", **job).values()) == [len(every)]
        (total,) = samples(scraped, "latency_seconds_sum", **job).values()
        assert total == pytest.approx(every.sum())
        for le in SDK_BOUNDS[:8]:
            (count,) = samples(scraped, "latency_seconds_bucket", le=f"{float(le)}", **job).values()
            assert count == int((every <= le).sum()), (name, le)
        (avg,) = samples(scraped, "latency_seconds_avg", **job).values()
        assert avg == pytest.approx(last.mean())  # the last window, decoded from either
    assert samples(scraped, "rltel_collector_requests_total", code="OK")


def test_health_service_and_partial_success(start_collector):
    server = start_collector()
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    request = ExportMetricsServiceRequest()
    metrics = request.resource_metrics.add().scope_metrics.add().metrics
    metrics.add(name="nodata")
    ok = metrics.add(name="ok")
    ok.gauge.data_points.add(as_double=2.0)
    bad = metrics.add(name="neg")
    bad.sum.is_monotonic, bad.sum.aggregation_temporality = True, 2
    bad.sum.data_points.add(as_double=-3.0)
    response = export_raw(server.endpoint, request.SerializeToString())
    assert response.partial_success.rejected_data_points == 2
    assert "'neg'" in response.partial_success.error_message
    assert server.pipeline.force_flush()
    scraped = scrape(server.metrics_url)
    assert list(samples(scraped, "ok").values()) == [2.0]
    assert list(samples(scraped, "rltel_collector_points_rejected_total").values()) == [2.0]
    assert list(samples(scraped, "rltel_collector_points_received_total").values()) == [3.0]


def test_malformed_wrong_and_oversized_requests(start_collector):
    server = start_collector(receiver={"max_message_bytes": 4096})
    endpoint = server.endpoint
    assert status_of(endpoint, b"\xff\xff\xff\x0f") == grpc.StatusCode.INVALID_ARGUMENT
    trace = ExportTraceServiceRequest()
    span = trace.resource_spans.add().scope_spans.add().spans.add(name="s")
    span.trace_id, span.span_id = b"\x81" * 16, b"\x92" * 8
    assert status_of(endpoint, trace.SerializeToString()) == grpc.StatusCode.INVALID_ARGUMENT
    big = gauges_request(400)
    assert len(big) > 4096
    assert status_of(endpoint, big) == grpc.StatusCode.RESOURCE_EXHAUSTED
    with grpc.insecure_channel(endpoint) as channel:  # another service's method
        other = channel.unary_unary(  # a signal the collector does not serve
            "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
        )
        with pytest.raises(grpc.RpcError) as err:
            other(b"", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert status_of(endpoint, gauges_request(5)) == grpc.StatusCode.OK  # still serving
    counts = server.request_counts()
    assert counts == {"INVALID_ARGUMENT": 2, "OK": 1}


def test_bearer_token(start_collector, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    server = start_collector(auth={"token_file": str(token)})
    body = gauges_request(3)
    assert status_of(server.endpoint, body) == grpc.StatusCode.UNAUTHENTICATED
    for header in ("Bearer wrong", "Bearer s3cret-toke", "Basic s3cret-token", "s3cret-token"):
        code = status_of(server.endpoint, body, metadata=(("authorization", header),))
        assert code == grpc.StatusCode.UNAUTHENTICATED, header
    good = (("authorization", "Bearer s3cret-token"),)
    assert status_of(server.endpoint, body, metadata=good) == grpc.StatusCode.OK
    provider = sdk_provider(
        server.endpoint,
        AggregationTemporality.CUMULATIVE,
        "sdk",
        headers={"authorization": "Bearer s3cret-token"},
    )
    provider.get_meter("m").create_counter("c").add(4)
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert server.pipeline.force_flush()
    assert list(samples(scrape(server.metrics_url), "c_total", job="sdk").values()) == [4.0]
    assert server.request_counts() == {"UNAUTHENTICATED": 5, "OK": 3}  # flush + shutdown


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls(start_collector, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-subj", "/CN=localhost"]
    san = "subjectAltName=DNS:localhost,IP:127.0.0.1"
    subprocess.run(
        [*command, "-keyout", str(key), "-out", str(cert), "-addext", san],
        check=True,
        capture_output=True,
    )
    server = start_collector(receiver={"tls": {"cert_file": str(cert), "key_file": str(key)}})
    credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    body = gauges_request(2)
    assert export_raw(server.endpoint, body, credentials=credentials) is not None
    assert status_of(server.endpoint, body) == grpc.StatusCode.UNAVAILABLE  # plaintext client


def test_flood_from_eight_clients_keeps_serving_with_bounded_memory(start_collector):
    server = start_collector(
        receiver={"max_workers": 2},
        limits={"max_concurrent_requests": 4, "queue_size": 16},
    )
    bodies = [gauges_request(300, step=s) for s in range(1, 9)]
    codes: list[grpc.StatusCode] = []
    depths: list[int] = []  # sampled by the clients, asserted on the main thread
    lock = threading.Lock()
    deadline = time.monotonic() + 3.0

    def client(i: int) -> None:
        mine, seen = [], []
        with grpc.insecure_channel(server.endpoint) as channel:
            call = channel.unary_unary(METHOD, request_serializer=None)
            while time.monotonic() < deadline and len(mine) < 400:
                try:
                    call(bodies[i], timeout=10)
                    mine.append(grpc.StatusCode.OK)
                except grpc.RpcError as err:
                    mine.append(err.code())
                seen.append(max(s.queue_depth for s in server.pipeline.stats().sinks.values()))
        with lock:
            codes.extend(mine)
            depths.extend(seen)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    assert depths and max(depths) <= 16  # the configured queue_size
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    ok = codes.count(grpc.StatusCode.OK)
    assert ok > 0 and len(codes) > 8
    assert server.request_counts().get("OK") == ok
    # Once the flood's snapshots are drained there is room again: the server still serves.
    # (Right after the flood, a full queue answers RESOURCE_EXHAUSTED: accepted means kept.)
    assert server.pipeline.force_flush()
    assert status_of(server.endpoint, gauges_request(4)) == grpc.StatusCode.OK
    assert server.pipeline.force_flush()
    stats = server.pipeline.stats()
    exported = stats.sinks[("shared", "prometheus")]
    assert exported.exported + exported.dropped == ok + 1
    assert stats.points_accepted == (ok * 303) + 7


class SlowSink(InMemorySink):
    """A sink that takes ``delay`` seconds per export: a stalled tracker backend."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        time.sleep(self.delay)
        return super().export(snapshot, timeout_s)


def test_memory_limit_refuses_with_retryable_status_then_recovers():
    config = from_dict(
        {"receiver": {"port": 0}, "limits": {"memory_limit_bytes": 20_000, "queue_size": 100}}
    )
    slow, fast = SlowSink(0.3), InMemorySink()
    server = CollectorServer(config, Pipeline([slow, fast], None, config.limits))
    server.start()
    try:
        body = gauges_request(100)  # ~3 KB
        codes = []
        for _ in range(12):
            try:
                export_raw(server.endpoint, body)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
                assert "google.rpc.retryinfo-bin" in dict(err.trailing_metadata())
            time.sleep(0.02)
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        assert codes[0] == grpc.StatusCode.OK
        accepted = codes.count(grpc.StatusCode.OK)
        assert len(fast.snapshots) == accepted  # the fast sink never waited on the slow one
        assert server.pipeline.stats().refused_overloaded == codes.count(
            grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        deadline = time.monotonic() + 10
        while server.pipeline.pending_bytes() > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status_of(server.endpoint, body) == grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert len(slow.snapshots) == accepted + 1 and slow.shut_down
