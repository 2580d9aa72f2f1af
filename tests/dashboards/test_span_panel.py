"""The Throughput board's phase latency panel, run in a real Prometheus, shows the spans sent.

Spans of known durations (the stock OpenTelemetry SDK's tracer with explicit start and end
times, its OTLP/gRPC exporter) reach a real collector in two batches; after each, the
collector's exposition is published on a :class:`~tests.dashboards.servers.FrozenTarget`
that a real Prometheus scrapes every second. Each of the panel's targets, with Grafana's
variables substituted and ``$__rate_interval`` exactly the span from the last scrape of the
first batch to the last of the second (so the window starts and ends on a sample and
``rate()`` extrapolates nothing), must equal a numpy reference computed from the second
batch's durations: their mean, and the p90 that Prometheus's ``histogram_quantile``
interpolates in the collector's buckets.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.config import from_dict
from collector.server import CollectorServer
from dashboards import build
from telemetry.model import names
from tests.dashboards import servers
from tests.dashboards.grafana_vars import interpolate

TITLE = "Phase latency (spans): mean and p90"
BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0)
RUN = {"experiment": "exp", "trial": "t1"}
# (role, phase) -> durations in seconds; batch 1 only moves the counters off zero.
FIRST = {
    ("trainer", "train"): [0.3, 0.6],
    ("rollout", "generate"): [2.0],
    ("rollout", "reward"): [0.5],
}
SECOND = {
    ("trainer", "train"): [0.2, 0.3, 0.45, 0.7, 0.8, 0.9, 0.05, 2.5],
    ("rollout", "generate"): [0.4, 1.5, 2.0, 3.0, 4.5],
    ("rollout", "reward"): [0.02, 0.03, 0.06, 0.2],
}


def _send(endpoint: str, batch: dict[tuple[str, str], list[float]]) -> None:
    """One span per duration, each its own trace, with exact start and end times."""
    for role in sorted({role for role, _ in batch}):
        resource = {
            names.EXPERIMENT: RUN["experiment"],
            names.TRIAL: RUN["trial"],
            names.ROLE: role,
            names.RANK: 0,
        }
        provider = TracerProvider(resource=Resource.create(resource), shutdown_on_exit=False)
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=30))
        )
        tracer = provider.get_tracer("span-panel")
        start = time.time_ns()
        for (r, phase), durations in batch.items():
            for seconds in durations if r == role else ():
                span = tracer.start_span(phase, start_time=start)
                span.end(end_time=start + round(seconds * 1e9))
        provider.shutdown()


def _count(url: str) -> float:
    """The collector's total span count over every series of the run."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rltel_span_duration_seconds_count{")
    )


def _publish_when(collector: CollectorServer, target: servers.FrozenTarget, count: int) -> None:
    """Publish the collector's exposition once it holds ``count`` spans; wait for 2 scrapes."""
    deadline = time.monotonic() + 60
    while _count(collector.metrics_url) != count:
        assert time.monotonic() < deadline, f"the collector never held {count} spans"
        time.sleep(0.05)
    with urllib.request.urlopen(collector.metrics_url, timeout=10) as response:
        target.publish(response.read(), response.headers["Content-Type"])
    target.wait_scraped(30)
    target.publish(*target.latest()[:2])  # a second scrape of the same state
    target.wait_scraped(30)


def _samples(prometheus: str, expr: str) -> list[tuple[float, float]]:
    """The raw (time, value) samples of a one-series range selector."""
    body = json.loads(servers.get(f"{prometheus}/api/v1/query?{_params(expr)}", timeout=10))
    (series,) = body["data"]["result"]
    return [(float(t), float(v)) for t, v in series["values"]]


def _params(expr: str, at: float | None = None) -> str:
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    return urllib.parse.urlencode(params)


def _quantile(q: float, durations: list[float]) -> float:
    """Prometheus's ``histogram_quantile`` over these durations in :data:`BUCKETS`."""
    uppers = [*BUCKETS, math.inf]
    cumulative = [int(np.sum(np.asarray(durations) <= b)) for b in uppers]
    rank = q * cumulative[-1]
    i = next(i for i, c in enumerate(cumulative) if c >= rank)
    if uppers[i] == math.inf:
        return uppers[i - 1]
    lower = 0.0 if i == 0 else uppers[i - 1]
    below = 0 if i == 0 else cumulative[i - 1]
    return lower + (uppers[i] - lower) * (rank - below) / (cumulative[i] - below)


def test_the_phase_latency_panel_shows_the_spans_mean_and_p90(tmp_path: Path):
    board = json.loads((build.GRAFANA_DIR / "throughput.json").read_text())
    (panel,) = [p for p in board["panels"] if p.get("title") == TITLE]
    variables = board["templating"]["list"]
    rules = tmp_path / "rules.yml"
    rules.write_text("groups: []\n")
    with ExitStack() as stack:
        target = stack.enter_context(servers.FrozenTarget())
        sinks = {
            "fileroot": str(tmp_path / "runs"),
            "prometheus": {"enabled": True, "host": "127.0.0.1", "port": 0},
        }
        config = from_dict(
            {
                "receiver": {"host": "127.0.0.1", "port": 0},
                "sinks": sinks,
                "traces": {"duration_buckets": list(BUCKETS)},
            }
        )
        collector = CollectorServer(config)
        collector.start()
        stack.callback(collector.stop, 10)
        config = servers.prometheus_config(target.address, None, rules, fast=True)
        prometheus = stack.enter_context(servers.prometheus(tmp_path, config))
        _send(collector.endpoint, FIRST)
        _publish_when(collector, target, sum(len(d) for d in FIRST.values()))
        _send(collector.endpoint, SECOND)
        total = sum(len(d) for d in (*FIRST.values(), *SECOND.values()))
        _publish_when(collector, target, total)

        one = 'rltel_span_duration_seconds_count{experiment="exp", trial="t1", phase="train"}'
        samples = _samples(prometheus, f"{one}[60s]")
        t1 = max(t for t, v in samples if v == len(FIRST[("trainer", "train")]))
        t2 = max(t for t, _ in samples)
        window_ms = round((t2 - t1) * 1000)  # [t1, t2]: Prometheus 2 ranges hold both ends
        for query in panel["targets"]:
            expr = interpolate(
                query["expr"],
                variables,
                {"experiment": [RUN["experiment"]], "trial": [RUN["trial"]]},
                {"__rate_interval": f"{window_ms}ms", "__interval": "1s"},
            )
            body = json.loads(
                servers.get(f"{prometheus}/api/v1/query?{_params(expr, t2)}", timeout=10)
            )
            assert body["status"] == "success", body
            got = {
                (s["metric"]["role"], s["metric"]["phase"]): float(s["value"][1])
                for s in body["data"]["result"]
            }
            if query["legendFormat"].startswith("mean"):
                want = {key: float(np.mean(d)) for key, d in SECOND.items()}
            else:
                want = {key: _quantile(0.9, d) for key, d in SECOND.items()}
            assert got.keys() == want.keys(), (expr, got)
            for key, value in want.items():
                assert math.isclose(got[key], value, rel_tol=1e-9), (expr, key, got[key], value)
