"""OTLP export path: encode + gRPC export throughput, and StatsLogger.commit latency.

Throughput: one snapshot of 5,000 gauges, and one of 5,000 histograms with 16 buckets,
encoded (``telemetry.otlp.encode``) and sent with ``OTLPMetricExporter`` to a real OTLP/gRPC
receiver on 127.0.0.1 (requests of at most 5,000 points). Baseline: the protobuf
serialisation alone of the same ``MetricsData`` (``encode_metrics`` + ``SerializeToString``),
the cost any OTLP exporter pays for these points.

Commit latency: ``StatsLogger.commit`` of a 400-key AReaL dict (200 ``k`` with
``k__count``), collector up and collector down (spooling from the first failed request),
p50/p99 over 500 commits. Baseline: AReaL's own commit-time work, the dict comprehension
dropping ``__count`` keys.

Write-ahead: what spooling every snapshot before sending it would add per step on the
queue's thread (one spool entry written and removed for the same commit's request), the
alternative to spooling from the first failure; same baseline.

    python bench/export_bench.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

from exporters.otlp.spool import Spool
from rltel.logger import StatsLogger
from telemetry.model.snapshot import Gauge, Histogram, Snapshot, Step
from telemetry.otlp.encode import Batch, encode
from telemetry.record.typed_keys import points_for
from tests.telemetry.otlp_receiver import Receiver

POINTS, BUCKETS, ROUNDS, COMMITS = 5000, 16, 5, 500
RESOURCE = (("service.name", "rltel"), ("rltel.role", "trainer"), ("rltel.rank", 0))


def gauges() -> Snapshot:
    points = tuple(
        Gauge(
            "moe_balance/expert_load",
            i / POINTS,
            attributes=(("layer", i // 64), ("expert", i % 64)),
        )
        for i in range(POINTS)
    )
    return Snapshot(points, Step(0, 1, 1), RESOURCE, time.time_ns())


def histograms() -> Snapshot:
    rng = np.random.default_rng(0)
    bounds = tuple(float(b) for b in np.linspace(-2, 2, BUCKETS - 1))
    points = []
    for i in range(POINTS):
        values = rng.normal(size=64)
        index = np.searchsorted(np.array(bounds), values, side="left")
        points.append(
            Histogram(
                f"ppo_actor/update/stat_{i}",
                count=values.size,
                sum=float(values.sum()),
                min=float(values.min()),
                max=float(values.max()),
                bounds=bounds,
                bucket_counts=tuple(int(c) for c in np.bincount(index, minlength=BUCKETS)),
            )
        )
    return Snapshot(tuple(points), Step(0, 1, 1), RESOURCE, time.time_ns())


def median_s(fn) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def throughput(name: str, snapshot: Snapshot, exporter: OTLPMetricExporter) -> None:
    encoded = encode(snapshot, max_points=POINTS + 3)

    def path() -> None:
        for data in encode(snapshot, max_points=POINTS + 3):
            exporter.export(data)

    def baseline() -> None:
        for data in encoded:
            encode_metrics(data).SerializeToString()

    encode_s = median_s(lambda: encode(snapshot, max_points=POINTS + 3))
    full_s = median_s(path)
    base_s = median_s(baseline)
    size = sum(encode_metrics(d).ByteSize() for d in encoded)
    print(
        f"{name:<28} encode {encode_s * 1e3:7.1f} ms  encode+export {full_s * 1e3:7.1f} ms "
        f"({POINTS / full_s / 1e3:6.1f}k points/s, {size / 1e6:.2f} MB)  "
        f"baseline serialise {base_s * 1e3:6.1f} ms  ratio {full_s / base_s:.2f}x"
    )


def areal_dict() -> dict[str, float]:
    data = {}
    for i in range(200):
        data[f"ppo_actor/update/key_{i}"] = float(i)
        data[f"ppo_actor/update/key_{i}__count"] = 64.0
    return data


def baseline_p50_ms(data: dict[str, float]) -> float:
    base = []
    for _ in range(COMMITS):
        start = time.perf_counter()
        _ = {k: v for k, v in data.items() if not k.endswith("__count")}
        base.append(time.perf_counter() - start)
    return float(np.percentile(np.array(base) * 1e3, 50))


def write_ahead() -> None:
    data = areal_dict()
    snapshot = Snapshot(points_for(data), Step(0, 1, 1), RESOURCE, time.time_ns())
    batch = Batch(snapshot, 0, 0, False)
    with tempfile.TemporaryDirectory() as root:
        spool = Spool(root, 10**9)
        costs = []
        for _ in range(COMMITS):
            start = time.perf_counter()
            spool.append(batch)
            spool.pop()
            costs.append(time.perf_counter() - start)
    lat = np.array(costs) * 1e3
    p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
    base_p50 = baseline_p50_ms(data)
    print(
        f"write-ahead per step (spool append + remove) p50 {p50:.3f} ms  p99 {p99:.3f} ms  "
        f"baseline p50 {base_p50:.3f} ms  ratio p50 {p50 / base_p50:.1f}x"
    )


def commit_latency(label: str, endpoint: str, up: Receiver | None) -> None:
    data = areal_dict()
    with tempfile.TemporaryDirectory() as root:
        stats = StatsLogger(
            {"fileroot": root, "otlp": {"endpoint": endpoint, "timeout": 2.0}},
            otlp_options={"backoff_s": 0.05, "max_backoff_s": 0.5},
        )
        latencies = []
        for step in range(COMMITS):
            start = time.perf_counter()
            stats.commit(0, step, step, data)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.001)
        health = stats.health()["otlp"]
        stats.close(5.0)
    lat = np.array(latencies) * 1e3
    p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
    base_p50 = baseline_p50_ms(data)
    print(
        f"commit, collector {label:<5} p50 {p50:.3f} ms  p99 {p99:.3f} ms  max {lat.max():.2f} ms  "
        f"baseline p50 {base_p50:.3f} ms  ratio p50 {p50 / base_p50:.1f}x  "
        f"(exported {health['points_exported']}, spooled {health['points_spooled']})"
    )
    if up is not None:
        print(f"  receiver got {len(up.requests)} requests")


def main() -> None:
    with Receiver() as receiver:
        exporter = OTLPMetricExporter(endpoint=receiver.endpoint, insecure=True, timeout=30)
        throughput("5000 gauges", gauges(), exporter)
        throughput(f"5000 histograms ({BUCKETS} buckets)", histograms(), exporter)
        exporter.shutdown()
        commit_latency("up", receiver.endpoint, receiver)
    down = Receiver()
    commit_latency("down", down.endpoint, None)
    write_ahead()


if __name__ == "__main__":
    main()
