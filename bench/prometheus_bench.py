"""Throughput of the Prometheus sink (export + scrape) against a plain prometheus_client registry.

Workload: one large trainer snapshot: 200 histograms with 16 buckets (half of them with
negative bounds), 400 scalar gauges, 50 counters, and MoE balance for 48 layers x 64
experts (a gauge and a counter per expert, a gauge per layer): 6,842 points, about
11,000 sample lines. Per iteration the sink folds the snapshot in (``export``) and renders one
text exposition (``render``). The baseline is ``generate_latest`` of a plain registry
holding the same series (prometheus_client ``Gauge``/``Counter``/``Histogram`` with the
same label sets, companion gauges included) -- the cost of exposing them at all. (The
plain ``Histogram`` omits ``_sum`` when its first bound is negative: 100 fewer lines.)

    python bench/prometheus_bench.py
"""

from __future__ import annotations

import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client import Counter as PCounter
from prometheus_client import Gauge as PGauge
from prometheus_client import Histogram as PHistogram

from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot, Step

HISTOGRAMS, GAUGES, COUNTERS, LAYERS, EXPERTS, BUCKETS = 200, 400, 50, 48, 64, 16
ITERATIONS, WARMUP = 20, 3
RESOURCE = (
    ("service.name", "rltel-trainer"),
    ("rltel.experiment", "bench"),
    ("rltel.trial", "t0"),
    ("rltel.role", "trainer"),
    ("rltel.rank", 0),
    ("host.name", "node0"),
)
BASE_LABELS = {"job": "rltel-trainer", "instance": "node0:rank0", "experiment": "bench"}
BASE_LABELS |= {"trial": "t0", "role": "trainer"}


def bounds_of(i: int) -> tuple[float, ...]:
    start = -8.0 if i % 2 else 0.0
    return tuple(start + 0.5 * b for b in range(BUCKETS))


def make_snapshot(step: int) -> Snapshot:
    points: list = []
    for i in range(HISTOGRAMS):
        counts = tuple((step + i + b) % 7 for b in range(BUCKETS + 1))
        total = sum(counts)
        points.append(
            Histogram(f"ppo_actor/stat_{i}", total, 0.5 * total, -1.0, 1.0, bounds_of(i), counts)
        )
    points += [ScalarMean(f"ppo_actor/scalar_{i}", float(i + step), 4) for i in range(GAUGES)]
    points += [Counter(f"train_perf/c_{i}", float(step * 100 + i)) for i in range(COUNTERS)]
    for layer in range(LAYERS):
        points.append(
            Gauge("moe_balance/max_over_ideal", 1.1, unit="1", attributes=(("layer", layer),))
        )
        for expert in range(EXPERTS):
            attrs = (("layer", layer), ("expert", expert))
            points.append(Gauge("moe_balance/load_percent", 1.5, attributes=attrs))
            points.append(Counter("moe_balance/tokens", float(step * 10), attributes=attrs))
    return Snapshot(points=tuple(points), step=Step(0, step, step), resource=RESOURCE)


def plain_registry() -> CollectorRegistry:
    """The same series in prometheus_client's own instruments."""
    registry = CollectorRegistry()
    names = list(BASE_LABELS)
    for i in range(HISTOGRAMS):
        hist = PHistogram(
            f"ppo_actor_stat_{i}", "h", names, registry=registry, buckets=bounds_of(i)
        )
        child = hist.labels(**BASE_LABELS)
        for b in range(BUCKETS + 1):
            child.observe(bounds_of(i)[min(b, BUCKETS - 1)])
        for stat in ("avg", "min", "max"):
            PGauge(f"ppo_actor_stat_{i}_{stat}", "g", names, registry=registry).labels(
                **BASE_LABELS
            ).set(1)
    for i in range(GAUGES):
        PGauge(f"ppo_actor_scalar_{i}", "g", names, registry=registry).labels(**BASE_LABELS).set(i)
    for i in range(COUNTERS):
        PCounter(f"train_perf_c_{i}", "c", names, registry=registry).labels(**BASE_LABELS).inc(i)
    ratio = PGauge("moe_balance_max_over_ideal_ratio", "g", [*names, "layer"], registry=registry)
    load = PGauge("moe_balance_load_percent", "g", [*names, "layer", "expert"], registry=registry)
    tokens = PCounter("moe_balance_tokens", "c", [*names, "layer", "expert"], registry=registry)
    for layer in range(LAYERS):
        ratio.labels(**BASE_LABELS, layer=str(layer)).set(1.1)
        for expert in range(EXPERTS):
            load.labels(**BASE_LABELS, layer=str(layer), expert=str(expert)).set(1.5)
            tokens.labels(**BASE_LABELS, layer=str(layer), expert=str(expert)).inc(10)
    return registry


def sample_lines(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def timed(fn, iterations: int = ITERATIONS) -> float:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    disable_created_metrics()
    snapshots = [make_snapshot(step) for step in range(ITERATIONS + WARMUP + 1)]
    points = len(snapshots[0].points)
    sink = PrometheusSink(PrometheusConfig(port=0, series_limit=100_000))
    steps = iter(range(10**9))

    def export_and_render() -> None:
        sink.export(snapshots[next(steps) % len(snapshots)])
        sink.render()

    t_export = timed(lambda: sink.export(snapshots[next(steps) % len(snapshots)]))
    t_render_text = timed(lambda: sink.render())
    t_render_om = timed(lambda: sink.render("application/openmetrics-text; version=1.0.0"))
    t_both = timed(export_and_render)
    body = sink.render()[0]

    def http_scrape() -> None:
        with urllib.request.urlopen(sink.url) as resp:
            resp.read()

    t_http = timed(http_scrape, iterations=5)
    sink.shutdown()

    registry = plain_registry()
    baseline = generate_latest(registry)
    t_base = timed(lambda: generate_latest(registry))

    lines = sample_lines(body)
    print(f"snapshot: {points} points; {lines} sample lines, {len(body) / 1e6:.2f} MB text")
    print(f"baseline exposition: {sample_lines(baseline)} sample lines")
    print(f"export (fold in)      {t_export * 1e3:8.1f} ms   {points / t_export:12,.0f} points/s")
    print(f"render text           {t_render_text * 1e3:8.1f} ms")
    print(f"render OpenMetrics    {t_render_om * 1e3:8.1f} ms")
    print(f"export + render text  {t_both * 1e3:8.1f} ms   {points / t_both:12,.0f} points/s")
    print(f"HTTP scrape (text)    {t_http * 1e3:8.1f} ms")
    print(f"baseline generate_latest (plain registry, same series) {t_base * 1e3:8.1f} ms")
    print(f"ratio export+render / baseline: {t_both / t_base:.2f}x")
    print(f"ratio render only / baseline:   {t_render_text / t_base:.2f}x")


if __name__ == "__main__":
    main()
