"""Collector throughput and latency.

Figures (one process; the gRPC hop is excluded from the throughput figures, included in
the latency figure):

- points/s parsed (protobuf only: the baseline), decoded, decoded + fanned out to the
  Prometheus sink (until the sink applied every snapshot), and to all sinks (Prometheus,
  TensorBoard, console to /dev/null, W&B offline with ``--wandb``);
- latency from ``Export`` returning to the value being visible on ``/metrics``;
- the durable queue's cost (``--durable``): points/s accepted (the requests' own time,
  journal writes and fsync included) and delivered (until every sink applied them) with the
  queue off, on with ``fsync: never`` and on with ``fsync: request`` (the default), to all
  sinks; each as a ratio to "off" in the same run, for large and for small requests.

Usage: ``python bench/collector_bench.py [--requests 40] [--points 5000] [--wandb]
[--durable]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.config import LimitsConfig, from_dict
from collector.durable import DurableState
from collector.pipeline import Pipeline
from collector.server import SERVICE, CollectorServer
from collector.sinks import run_sink_factory
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot, Step
from telemetry.otlp.decode import Decoder
from telemetry.otlp.encode import encode

RESOURCE = (("rltel.experiment", "bench"), ("rltel.trial", "t"), ("rltel.role", "trainer"))


def training_request(step: int, n: int) -> bytes:
    """A trainer export of ``n`` points: 40% histograms, 20% scalars, 30% gauges, 10% counters."""
    points = []
    for i in range(n - 3):
        kind = i % 10
        if kind < 4:
            points.append(Histogram(f"ppo_actor/update/h{i}", 512, 256.0 + i, -1.0, 3.0))
        elif kind < 6:
            points.append(ScalarMean(f"ppo_actor/scalar{i}", 0.5 + i, 8))
        elif kind < 9:
            points.append(Gauge(f"timeperf/g{i}", float(i), unit="s"))
        else:
            points.append(Counter(f"train_perf/c{i}", float(step * i), "{token}"))
    snapshot = Snapshot(tuple(points), Step(0, step, step), RESOURCE, time.time_ns())
    (data,) = encode(snapshot, window_start_unix_nano=1, max_points=n)
    return encode_metrics(data).SerializeToString()


def rate(label: str, points: int, seconds: float, baseline: float | None) -> float:
    per_s = points / seconds
    ratio = f"  ({per_s / baseline:.3f} x parse-only)" if baseline else ""
    print(f"{label:<42} {per_s:>12,.0f} points/s{ratio}")
    return per_s


def throughput(bodies: list[bytes], points: int, all_sinks: bool, wandb: bool) -> None:
    total = points * len(bodies)
    start = time.perf_counter()
    requests = [ExportMetricsServiceRequest.FromString(b) for b in bodies]
    base = rate("parse (protobuf only, baseline)", total, time.perf_counter() - start, None)

    decoder = Decoder()
    start = time.perf_counter()
    for request in requests:
        decoder.decode(request)
    rate("parse + decode to Snapshots", total, time.perf_counter() - start, base)

    limits = LimitsConfig(queue_size=len(bodies) + 1)
    prometheus = PrometheusSink(PrometheusConfig(enabled=True, series_limit=10**6), serve=False)
    pipeline = Pipeline([prometheus], None, limits)
    start = time.perf_counter()
    for body in bodies:
        pipeline.consume(pipeline.decoder.read(ExportMetricsServiceRequest.FromString(body)))
    assert pipeline.force_flush(600)
    rate("parse + decode + Prometheus sink", total, time.perf_counter() - start, base)
    pipeline.shutdown(10)
    if not all_sinks:
        return
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as devnull:
        config = from_dict(run_sinks_config(tmp, wandb, len(bodies)))
        prometheus = PrometheusSink(PrometheusConfig(enabled=True, series_limit=10**6), serve=False)
        pipeline = Pipeline([prometheus], run_sink_factory(config.sinks), config.limits)
        with contextlib.redirect_stdout(devnull):
            pipeline.consume(
                pipeline.decoder.read(ExportMetricsServiceRequest.FromString(bodies[0]))
            )
            assert pipeline.force_flush(600)  # run sinks built (W&B init) before timing
            start = time.perf_counter()
            for body in bodies[1:]:
                pipeline.consume(
                    pipeline.decoder.read(ExportMetricsServiceRequest.FromString(body))
                )
            assert pipeline.force_flush(600)
            elapsed = time.perf_counter() - start
            pipeline.shutdown(60)
        names = ", ".join(name for _, name in pipeline.stats().sinks)
        rate(f"parse + decode + all sinks ({names})", points * (len(bodies) - 1), elapsed, base)


def run_sinks_config(tmp: str, wandb: bool, requests: int) -> dict:
    """A collector with every run sink (W&B offline or off) under ``tmp``, a queue that
    holds every request, and Prometheus off (the bench adds its own, not served)."""
    sinks = {
        "fileroot": tmp,
        "prometheus": {"enabled": False},
        "tensorboard": {"path": os.path.join(tmp, "tb")},
        "console": {"enabled": True},
        "wandb": {"mode": "offline" if wandb else "disabled"},
    }
    return {"sinks": sinks, "limits": {"queue_size": requests + 1}}


def durable_cost(bodies: list[bytes], points: int, wandb: bool) -> None:
    """Points/s accepted and delivered to all sinks, durable queue off / never / request."""
    base: dict[str, float] = {}
    for mode in ("off", "never", "request"):
        with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as devnull:
            config = from_dict(run_sinks_config(tmp, wandb, len(bodies)))
            prometheus = PrometheusSink(
                PrometheusConfig(enabled=True, series_limit=10**6), serve=False
            )
            pipeline = Pipeline([prometheus], run_sink_factory(config.sinks), config.limits)
            if mode != "off":
                state = Path(tmp) / "state"
                pipeline.recover(DurableState(state, 1 << 40, mode == "request", "bench"))
            with contextlib.redirect_stdout(devnull):
                first = ExportMetricsServiceRequest.FromString(bodies[0])
                pipeline.consume(pipeline.decoder.read(first))
                assert pipeline.force_flush(600)  # run sinks built before timing
                start = time.perf_counter()
                for body in bodies[1:]:
                    request = ExportMetricsServiceRequest.FromString(body)
                    pipeline.consume(pipeline.decoder.read(request))
                accepted = time.perf_counter() - start
                assert pipeline.force_flush(600)
                delivered = time.perf_counter() - start
                pipeline.shutdown(60)
        total = points * (len(bodies) - 1)
        for what, seconds in (("accepted", accepted), ("delivered", delivered)):
            per_s = total / seconds
            base.setdefault(what, per_s)
            label = f"durable queue {mode:<7} {what} ({len(bodies) - 1} x {points} points)"
            print(f"{label:<58} {per_s:>12,.0f} points/s  ({per_s / base[what]:.3f} x off)")


def latency(trials: int) -> None:
    config = from_dict({"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0}}})
    server = CollectorServer(config)
    server.start()
    channel = grpc.insecure_channel(server.endpoint)
    call = channel.unary_unary(f"/{SERVICE}/Export", request_serializer=None)
    samples = []
    try:
        for trial in range(1, trials + 1):
            snapshot = Snapshot((Gauge("bench/latency_probe", float(trial)),), None, RESOURCE)
            (data,) = encode(snapshot)
            body = encode_metrics(data).SerializeToString()
            wanted = b"bench_latency_probe{", f" {float(trial)}".encode()
            call(body, timeout=10)
            returned = time.perf_counter()
            while not any(
                line.startswith(wanted[0]) and line.endswith(wanted[1])
                for line in urllib.request.urlopen(server.metrics_url, timeout=10)
                .read()
                .split(b"\n")
            ):
                if time.perf_counter() - returned > 10:
                    raise RuntimeError(f"value {trial} not visible on /metrics after 10 s")
            samples.append(time.perf_counter() - returned)
    finally:
        channel.close()
        server.stop(10)
    samples.sort()
    p50 = samples[len(samples) // 2] * 1e3
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3
    label = "Export returned -> visible on /metrics"
    print(f"{label:<42} p50 {p50:.2f} ms, p99 {p99:.2f} ms ({trials} trials, one scrape incl.)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--wandb", action="store_true", help="include W&B offline in all sinks")
    parser.add_argument("--no-all-sinks", action="store_true")
    parser.add_argument("--durable", action="store_true", help="only the durable queue's cost")
    args = parser.parse_args()
    if args.durable:
        for points, requests in ((args.points, args.requests), (100, 10 * args.requests)):
            bodies = [training_request(step, points) for step in range(1, requests + 1)]
            durable_cost(bodies, points, args.wandb)
        return
    bodies = [training_request(step, args.points) for step in range(1, args.requests + 1)]
    print(f"{args.requests} requests x {args.points} points ({len(bodies[0]):,} bytes each)")
    throughput(bodies, args.points, not args.no_all_sinks, args.wandb)
    latency(args.trials)


if __name__ == "__main__":
    main()
