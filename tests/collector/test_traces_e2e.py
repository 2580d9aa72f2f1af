"""A 2-rank gloo job and 2 rollout worker processes send spans with the stock OpenTelemetry
SDK's OTLP/gRPC exporter to a real collector: one merged trace file with 4 processes,
every span once, nested and ordered, in the trace event format; the span duration
histograms reach a real Prometheus with the right counts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from collector.traces import CURRENT
from telemetry.model import names, trace_names
from tests.collector.conftest import samples, scrape
from tests.collector.trace_checks import (
    check_format,
    check_nested_ordered,
    check_ranks_and_workers,
    load,
    processes,
)
from tests.dashboards.servers import api, prometheus, prometheus_config, until
from tests.distributed import run_ranks

RULES = Path(__file__).resolve().parents[2] / "dashboards/prometheus/alerts.yml"
STEPS = 3
TRAIN_PHASES = ("rollout", "train", "sync")
WORKER_PHASES = ("generate", "reward")

SETUP = """
import threading
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

def tracer_of(endpoint, resource):
    provider = TracerProvider(resource=Resource.create(resource), shutdown_on_exit=False)
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    return provider, provider.get_tracer("e2e")
"""

WORKER = SETUP + textwrap.dedent(
    """
    import sys
    endpoint, worker, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource = {"rltel.experiment": "exp", "rltel.trial": "t1", "rltel.role": "rollout",
                "rltel.worker_id": worker}
    provider, tracer = tracer_of(endpoint, resource)
    for step in range(steps):
        attrs = {"rltel.step": step, "thread.id": threading.get_native_id()}
        with tracer.start_as_current_span("episode", attributes=attrs):
            for phase in ("generate", "reward"):
                with tracer.start_as_current_span(phase, attributes=attrs):
                    sum(range(20000))
    provider.shutdown()
    """
)


def _rank(rank: int, world: int, endpoint: str) -> int:
    """One trainer rank: a step span with rollout, train and an all-reduce in it per step."""
    import torch
    import torch.distributed as dist

    namespace: dict = {}
    exec(SETUP, namespace)
    resource = {
        names.EXPERIMENT: "exp",
        names.TRIAL: "t1",
        names.ROLE: "trainer",
        names.RANK: rank,
    }
    provider, tracer = namespace["tracer_of"](endpoint, resource)
    made = 0
    for step in range(STEPS):
        attrs = {trace_names.STEP: step, trace_names.THREAD_ID: threading.get_native_id()}
        with tracer.start_as_current_span("step", attributes=attrs):
            with tracer.start_as_current_span("rollout", attributes=attrs):
                torch.randn(64, 64).sum()
            with tracer.start_as_current_span("train", attributes=attrs):
                (torch.randn(128, 128) @ torch.randn(128, 128)).sum()
            with tracer.start_as_current_span("sync", attributes=attrs):
                dist.all_reduce(torch.ones(4))
        made += 1 + len(TRAIN_PHASES)
    provider.shutdown()  # the last batch exported (and consumed) before this returns
    return made


def test_gloo_ranks_and_rollout_workers_into_one_timeline_and_prometheus(start_collector, tmp_path):
    collector = start_collector(sinks={"fileroot": str(tmp_path)})
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, collector.endpoint, str(w), str(STEPS)])
        for w in range(2)
    ]
    made = run_ranks(_rank, 2, collector.endpoint, timeout=120)
    for worker in workers:
        assert worker.wait(timeout=60) == 0
    address = collector.metrics_url.removeprefix("http://").removesuffix("/metrics")
    with prometheus(tmp_path, prometheus_config(address, None, RULES, fast=True)) as prom:

        def count(role: str, phase: str) -> float | None:
            expr = (
                f'rltel_span_duration_seconds_count{{experiment="exp",trial="t1",'
                f'role="{role}",phase="{phase}"}}'
            )
            result = api(prom, "query", query=expr)["result"]
            return float(result[0]["value"][1]) if result else None

        assert until(lambda: count("rollout", "reward")) == 2 * STEPS
        for phase in ("step", *TRAIN_PHASES):
            assert count("trainer", phase) == 2 * STEPS, phase
        for phase in ("episode", *WORKER_PHASES):
            assert count("rollout", phase) == 2 * STEPS, phase
        buckets = api(
            prom, "query", query='rltel_span_duration_seconds_bucket{role="trainer",phase="train"}'
        )["result"]
        inf = [b for b in buckets if b["metric"]["le"] == "+Inf"]
        assert float(inf[0]["value"][1]) == 2 * STEPS and len(buckets) == 13
    spans = sum(made) + 2 * STEPS * (1 + len(WORKER_PHASES))
    own = scrape(collector.metrics_url)  # the merge's counters on the collector's /metrics
    written = samples(own, "rltel_collector_trace_spans_written_total", run="exp_t1")
    assert list(written.values()) == [spans]
    assert list(samples(own, "rltel_collector_trace_spans_pending").values()) == [0]
    collector.stop(30)
    events = check_format(load(tmp_path / "exp" / "t1" / CURRENT))
    check_nested_ordered(events)
    complete = check_ranks_and_workers(events, spans)
    for pid, name in processes(events).items():
        mine = [e for e in complete if e["pid"] == pid]
        phases = (
            ("step", *TRAIN_PHASES) if name.startswith("trainer") else ("episode", *WORKER_PHASES)
        )
        assert sorted(e["name"] for e in mine) == sorted(phases * STEPS)
        top = sorted((e for e in mine if "parent_id" not in e["args"]), key=lambda e: e["ts"])
        assert [e["args"]["step"] for e in top] == list(range(STEPS))
        for parent in top:  # each step's phases inside its span
            inside = [e for e in mine if e["args"].get("parent_id") == parent["args"]["span_id"]]
            assert len(inside) == len(phases) - 1
            assert all(
                parent["ts"] <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"]
                for e in inside
            )
