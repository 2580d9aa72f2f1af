"""Traces and logs through the OTLP sink: what they cost, against baselines in the same run.

1. The span exporter (``OtlpSink.span_exporter()``), as a ``BatchSpanProcessor`` calls it:
   ``export`` of a batch of ``--spans`` spans (the SDK's batch size, 512) encodes it with
   the SDK's ``encode_spans`` and queues it. Baseline: ``encode_spans`` of the same batch
   alone, the least any OTLP exporter does. Timed with the collector up, and down (nobody
   listening: the queue spools), in thread CPU time and wall time of the calling thread:
   the down/up ratio shows that the caller never waits on the network.
2. A step's samples on the OTLP sink's queue thread: encoding a trainer snapshot of
   ``--points`` points with ``--samples`` kept samples (a 600-character prompt, a
   2,400-character completion, reward and length: its metric requests and its logs
   request), against the same snapshot without them (its metric requests, health points
   included).
3. The collector's trace service: spans a second handed to a consumer that keeps nothing,
   ``--requests`` requests of ``--spans`` spans from one client, against the metrics
   service's points a second from the same client (requests of as many gauge points).

Reported: medians over ``--rounds`` and the ratios.

    python bench/signals_bench.py [--spans 512] [--rounds 15] [--points 200] [--samples 20]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from collector.config import from_dict
from collector.pipeline import Pipeline
from collector.server import CollectorServer
from exporters.base import InMemorySink
from exporters.otlp.sink import OtlpSink
from exporters.otlp.spool import Spool
from exporters.queued import QueuedSink
from telemetry.model.sample import Sample
from telemetry.model.snapshot import ScalarMean, Snapshot, Step
from telemetry.otlp.encode import Batch, encode, encode_batch


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Keep:
    """A span exporter keeping the spans it gets (to reuse them as the batches)."""

    def __init__(self) -> None:
        self.spans: list = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def batch_of(n: int) -> list:
    provider = TracerProvider()
    keep = Keep()
    provider.add_span_processor(SimpleSpanProcessor(keep))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        with tracer.start_as_current_span("train.ppo_update", attributes={"step": i, "rank": 0}):
            pass
    return keep.spans


def timed(call) -> tuple[float, float]:
    """(thread CPU us, wall us) of one call."""
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    call()
    return (time.thread_time_ns() - c0) / 1e3, (time.perf_counter_ns() - w0) / 1e3


def span_exporter(spans: list, rounds: int, up: bool, directory: Path) -> dict[str, float]:
    port = free_port()
    server = None
    if up:
        config = from_dict({"receiver": {"port": port}})
        server = CollectorServer(config, Pipeline([InMemorySink()], None, config.limits))
        server.start()
    sink = OtlpSink(f"127.0.0.1:{port}", spool=Spool(directory / f"spool-{up}", 1 << 30))
    queued = QueuedSink.of(sink)
    exporter = sink.span_exporter()
    ours, base = [], []
    try:
        for _ in range(rounds):
            base.append(timed(lambda: encode_spans(spans)))
            ours.append(timed(lambda: exporter.export(spans)))
        queued.force_flush(60.0 if up else 1.0)
    finally:
        queued.shutdown(2.0)
        if server is not None:
            server.stop(5)
    return {
        "export_cpu": statistics.median(c for c, _ in ours),
        "export_wall": statistics.median(w for _, w in ours),
        "encode_cpu": statistics.median(c for c, _ in base),
    }


def snapshot(points: int, samples: int) -> Snapshot:
    kept = tuple(
        Sample(
            "rollout",
            text=(("prompt", "p" * 600), ("completion", "the answer is λ " * 150)),
            numbers=(("reward", float(i)), ("length", 2400.0)),
        )
        for i in range(samples)
    )
    scalars = tuple(ScalarMean(f"ppo_actor/g{i}", float(i), 1) for i in range(points))
    return Snapshot(scalars, Step(0, 1, 1), (("rltel.role", "trainer"),), 1, samples=kept)


def encoded(sink: OtlpSink, snap: Snapshot) -> None:
    """What the queue's thread encodes for ``snap``: its metric requests and its samples'."""
    for part in sink.requests_left(snap):
        if isinstance(part, Batch):
            encode_batch(part)


def wire_cost(points: int, samples: int, rounds: int) -> tuple[float, float]:
    sink = OtlpSink("127.0.0.1:1")
    with_samples, without = snapshot(points, samples), snapshot(points, 0)
    ours, base = [], []
    for _ in range(rounds):
        for snap, out in ((with_samples, ours), (without, base)):
            snap = Snapshot(snap.points, snap.step, snap.resource, 1, samples=snap.samples)
            out.append(timed(lambda snap=snap: encoded(sink, snap))[0])
            sink.forget(snap)
    sink.shutdown()
    return statistics.median(ours), statistics.median(base)


def service_rate(spans: list, requests: int) -> tuple[float, float]:
    """(spans/s through TraceService, points/s through MetricsService), one client."""
    config = from_dict({"receiver": {"port": 0}, "durable": {"enabled": False}})

    class Nothing:
        def consume(self, request) -> None:
            pass

        def flush(self) -> bool:
            return True

        def shutdown(self, timeout_s: float) -> None:
            pass

    server = CollectorServer(
        config, Pipeline([InMemorySink()], None, config.limits), trace_consumers=[Nothing()]
    )
    server.start()
    trace_body = encode_spans(spans).SerializeToString()
    (metrics_data,) = encode(snapshot(len(spans), 0), max_points=len(spans) + 10)
    metric_body = encode_metrics(metrics_data).SerializeToString()
    rates = []
    try:
        with grpc.insecure_channel(server.endpoint) as channel:
            for method, body in (
                ("/opentelemetry.proto.collector.trace.v1.TraceService/Export", trace_body),
                ("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export", metric_body),
            ):
                call = channel.unary_unary(method)
                start = time.perf_counter()
                for _ in range(requests):
                    call(body, timeout=30)
                rates.append(requests * len(spans) / (time.perf_counter() - start))
    finally:
        server.stop(5)
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    spans = batch_of(args.spans)
    with tempfile.TemporaryDirectory() as tmp:
        up = span_exporter(spans, args.rounds, True, Path(tmp))
        down = span_exporter(spans, args.rounds, False, Path(tmp))
    print(f"span exporter, {args.spans} spans a batch (thread CPU us; wall us):")
    for name, got in (("collector up", up), ("collector down", down)):
        print(
            f"  {name:15s} export {got['export_cpu']:8.0f} cpu {got['export_wall']:8.0f} wall"
            f" | encode_spans alone {got['encode_cpu']:8.0f} cpu"
            f" | ratio {got['export_cpu'] / got['encode_cpu']:.2f}x"
        )
    print(f"  down/up export wall: {down['export_wall'] / up['export_wall']:.2f}x")
    ours, base = wire_cost(args.points, args.samples, args.rounds)
    print(
        f"encoding a {args.points}-point step: with {args.samples} samples {ours:.0f} us, "
        f"without {base:.0f} us, ratio {ours / base:.2f}x"
    )
    spans_s, points_s = service_rate(spans, args.requests)
    print(
        f"collector, one client: {spans_s:,.0f} spans/s (TraceService), "
        f"{points_s:,.0f} points/s (MetricsService), ratio {spans_s / points_s:.2f}x"
    )


if __name__ == "__main__":
    main()
