"""CPU per scrape of a 2,000-series engine exposition, against the bare parse of the same text.

Workload: the metrics of a vLLM server with 24 data-parallel engines, built with
prometheus_client from vLLM's own definitions (``vllm/v1/metrics/loggers.py``: gauges,
counters with their ``_created`` gauges, the TTFT, inter-token and end-to-end latency
histograms with vLLM's buckets), every series moving between scrapes: 2,040 series
(samples, ``_created`` gauges included), 1,632 of them histogram buckets. The endpoint is
``python -m http.server`` in another process serving the exposition file, so the CPU
measured here is the collector's alone.

Per scrape, with ``time.process_time`` (every thread of this process):

- baseline: ``list(text_string_to_metric_families(text))`` of the same text (the parse that
  any scraper pays);
- scrape: one :meth:`collector.scrape.target.TargetLoop.scrape_once` into a pipeline with the
  Prometheus sink (HTTP fetch, parse, conversion to points with histogram windows, engine
  figures, hand-off) and the Prometheus sink folding it in (waited for with ``force_flush``,
  its worker thread's CPU included).

    python bench/scrape_bench.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collector.pipeline import Pipeline
from collector.scrape import ScrapeHealth, TargetLoop
from collector.scrape.config import ScrapeTarget
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig

ENGINES, SCRAPES, WARMUP = 24, 30, 3
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5)
TTFT += (10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5)
TPOT += (10.0, 20.0, 40.0, 80.0)
E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
E2E += (120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class VllmServer:
    """vLLM's metrics for ``ENGINES`` engines; :meth:`advance` moves every series."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        names = ["model_name", "engine"]
        r = self.registry
        self.gauges = [
            Gauge(n, n, names, registry=r)
            for n in ("vllm:num_requests_running", "vllm:num_requests_waiting")
        ] + [Gauge("vllm:kv_cache_usage_perc", "kv", names, registry=r)]
        self.counters = [
            Counter(n, n, names, registry=r)
            for n in ("vllm:prompt_tokens", "vllm:generation_tokens")
        ] + [
            Counter(n, n, names, registry=r)
            for n in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
        ]
        self.histograms = [
            Histogram("vllm:time_to_first_token_seconds", "ttft", names, buckets=TTFT, registry=r),
            Histogram(
                "vllm:time_per_output_token_seconds", "tpot", names, buckets=TPOT, registry=r
            ),
            Histogram("vllm:e2e_request_latency_seconds", "e2e", names, buckets=E2E, registry=r),
        ]
        self.step = 0

    def advance(self) -> bytes:
        self.step += 1
        for engine in range(ENGINES):
            labels = ("model", str(engine))
            for i, gauge in enumerate(self.gauges):
                gauge.labels(*labels).set((self.step + engine + i) % 17)
            for i, counter in enumerate(self.counters):
                counter.labels(*labels).inc(100 + i + engine)
            for i, histogram in enumerate(self.histograms):
                for k in range(5):
                    histogram.labels(*labels).observe(0.01 * (1 + (self.step * k + i) % 300))
        return generate_latest(self.registry)


def series(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def main() -> None:
    engine = VllmServer()
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "metrics"
        path.write_bytes(engine.advance())
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", root],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            port = int(server.stdout.readline().split("port ")[1].split()[0])
            url = f"http://127.0.0.1:{port}/metrics"
            urllib.request.urlopen(url, timeout=10).read()
            run(engine, path, url)
        finally:
            server.terminate()
            server.wait(10)


def run(engine: VllmServer, path: Path, url: str) -> None:
    sink = PrometheusSink(PrometheusConfig(enabled=True, port=0), serve=False)
    pipeline = Pipeline([sink])
    target = ScrapeTarget(url=url, experiment="bench", trial="t0")
    loop = TargetLoop(target, pipeline.deliver, ScrapeHealth(), 10.0, 1 << 26)
    parse_cpu, scrape_cpu, scrape_wall = [], [], []
    for i in range(WARMUP + SCRAPES):
        body = engine.advance()
        path.write_bytes(body)
        text = body.decode()
        start = time.process_time()
        list(text_string_to_metric_families(text))
        parse = time.process_time() - start
        start, wall = time.process_time(), time.perf_counter()
        assert loop.scrape_once()
        assert pipeline.force_flush(30)
        cpu, wall = time.process_time() - start, time.perf_counter() - wall
        if i >= WARMUP:
            parse_cpu.append(parse)
            scrape_cpu.append(cpu)
            scrape_wall.append(wall)
    pipeline.shutdown(10)
    n = series(text)
    print(f"exposition: {n} series, {len(body)} bytes, {ENGINES} engines; {SCRAPES} scrapes")
    median_parse = statistics.median(parse_cpu)
    median_scrape = statistics.median(scrape_cpu)
    print(f"bare parse CPU per scrape:   median {median_parse * 1e3:7.2f} ms")
    p90 = statistics.quantiles(scrape_cpu, n=10)[-1]
    wall = statistics.median(scrape_wall)
    print(
        f"collector CPU per scrape:    median {median_scrape * 1e3:7.2f} ms, "
        f"p90 {p90 * 1e3:7.2f} ms, max {max(scrape_cpu) * 1e3:7.2f} ms "
        f"(wall median {wall * 1e3:.1f} ms)"
    )
    print(f"ratio collector / bare parse (medians): {median_scrape / median_parse:.2f}x")
    verdict = "met" if median_scrape <= 0.050 else "EXCEEDED"
    print(f"budget: 50 ms CPU per scrape (median) -> {verdict}")


if __name__ == "__main__":
    main()
