"""The scrape receiver inside a running collector: a real Prometheus reads the engine series
with the run's labels, and TensorBoard's and W&B's own readers find the engine figures at the
training steps the collector aligned them to.

The engine endpoint serves vLLM's metric definitions (commit 005a810b, see engines.py).
"""

from __future__ import annotations

import glob
import time
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

from collector.scrape import ScrapeHealth, TargetLoop
from collector.scrape.config import ScrapeTarget
from exporters.tensorboard.sink import tensorboard_tag
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.encode import encode
from tests.dashboards.servers import api, prometheus, prometheus_config, until
from tests.wandb_log import inspect_wandb

from .engines import MODEL, Engine, serving

METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
RULES = Path(__file__).resolve().parents[2] / "dashboards/prometheus/alerts.yml"


def test_prometheus_reads_engine_series_with_the_run_labels(start_collector, tmp_path):
    engine = Engine("vllm", engines=2)
    engine.get("generation", 1).inc(4321)
    engine.get("kv", 0).set(0.625)
    for value in (0.03, 0.3):
        engine.get("ttft", 1).observe(value)
    with serving(engine) as server:
        target = {"url": server.url, "experiment": "exp", "trial": "t1", "interval_s": 0.2}
        collector = start_collector(scrape={"targets": [target]})
        address = collector.metrics_url.removeprefix("http://").removesuffix("/metrics")
        config = prometheus_config(address, None, RULES, fast=True)
        run = f'experiment="exp",trial="t1",role="rollout-engine",instance="{server.instance}"'
        with prometheus(tmp_path, config) as prom:

            def query(expr: str):
                return api(prom, "query", query=expr)["result"]

            tokens = until(lambda: query(f'vllm:generation_tokens_total{{{run},engine="1"}}'))
            assert tokens, "the engine counter never reached Prometheus"
            labels = tokens[0]["metric"]
            assert labels["model_name"] == MODEL and labels["job"] == "rollout-engine"
            assert float(tokens[0]["value"][1]) == 4321.0
            kv = query(f'vllm:kv_cache_usage_perc{{{run},engine="0"}}')
            assert float(kv[0]["value"][1]) == 0.625
            bucket = query(f'vllm:time_to_first_token_seconds_bucket{{{run},engine="1",le="0.04"}}')
            assert float(bucket[0]["value"][1]) == 1.0
            up = until(lambda: query(f"rltel_scrape_up{{{run}}} == 1"))
            assert up and up[0]["metric"]["target"] == server.url


def _train(channel, step: int) -> None:
    resource = (
        ("rltel.experiment", "exp"),
        ("rltel.trial", "t1"),
        ("service.name", "trainer"),
        ("rltel.rank", 0),
    )
    snapshot = Snapshot(
        (Gauge("train/loss", 1.0 / step),), Step(0, step, step), resource, time.time_ns()
    )
    (data,) = encode(snapshot, max_points=16)
    channel.unary_unary(METHOD, request_serializer=None)(
        encode_metrics(data).SerializeToString(), timeout=30
    )


def scrape_between_steps(collector, engine: Engine) -> str:
    """Scrape ``engine`` into run exp/t1 before any training step (running 1), at step 1
    (running 2, waiting 7) and at step 3 after steps 2 and 3 (running 3, KV cache 0.875),
    then wait for the sinks; the engine's instance label."""
    with serving(engine) as server, grpc.insecure_channel(collector.endpoint) as channel:
        target = ScrapeTarget(url=server.url, experiment="exp", trial="t1")
        loop = TargetLoop(target, collector.pipeline.deliver, ScrapeHealth(), 10.0, 1 << 24)
        engine.get("running").set(1)
        assert loop.scrape_once()  # before any training step: step 0
        _train(channel, 1)
        engine.get("running").set(2)
        engine.get("waiting").set(7)
        assert loop.scrape_once()  # at step 1
        _train(channel, 2)
        _train(channel, 3)
        engine.get("running").set(3)
        engine.get("kv").set(0.875)
        assert loop.scrape_once()  # at step 3, the latest
        assert collector.pipeline.force_flush(60)
    return server.instance


def test_engine_figures_land_at_the_latest_training_step(start_collector, tmp_path):
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing import event_accumulator as ea

    files = tmp_path / "files"
    sinks = {
        "fileroot": str(files),
        "tensorboard": {"path": str(tmp_path / "tb")},
        "wandb": {"mode": "offline"},
    }
    collector = start_collector(sinks=sinks)
    instance = scrape_between_steps(collector, Engine("vllm"))
    collector.stop(60)  # W&B's run finished: its file complete
    key = f"rollout_engine/instance_{instance}/running_requests"
    acc = ea.EventAccumulator(str(tmp_path / "tb" / "exp" / "t1"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    running = [(e.step, e.value) for e in acc.Scalars(tensorboard_tag(key))]
    assert running == [(0, 1.0), (1, 2.0), (3, 3.0)]
    kv = acc.Scalars(tensorboard_tag(key.replace("running_requests", "kv_cache_usage")))
    assert [(e.step, e.value) for e in kv] == [(0, 0.0), (1, 0.0), (3, 0.875)]
    (path,) = glob.glob(str(files / "exp" / "t1" / "wandb" / "offline-run-*" / "*.wandb"))
    rows = [r["history"]["item"] for r in inspect_wandb(path) if r["type"] == "history"]
    logged = [(int(r["engine/step"]), r[key]) for r in rows if key in r]
    assert logged == [(0, 1.0), (1, 2.0), (3, 3.0)]
    waiting = key.replace("running_requests", "waiting_requests")
    assert [r[waiting] for r in rows if waiting in r] == [0.0, 7.0, 7.0]
