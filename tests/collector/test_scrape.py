"""The scrape receiver against vLLM and SGLang endpoints served over HTTP on loopback.

The endpoints (``tests/collector/engines.py``) serve the exposition ``prometheus_client``
writes for the engines' own metric definitions (vLLM commit 005a810b, SGLang commit
93d04878; see that module). Each scrape goes through the collector's pipeline into a real
Prometheus sink (its exposition parsed back) and an in-memory run sink (the step-based
sinks' view); the TensorBoard/W&B files and a real Prometheus are in test_scrape_e2e.py.
"""

from __future__ import annotations

import logging
import math
import time

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collector.pipeline import Pipeline
from collector.scrape import ScrapeHealth, Scraper, TargetLoop, quantile
from collector.scrape.config import ScrapeConfig, ScrapeTarget
from exporters.base import InMemorySink
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from telemetry.config.read import validate
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Histogram, Snapshot, Step

from .engines import MODEL, Engine, serving


class Collector:
    """A pipeline with a real Prometheus sink and one in-memory sink per run."""

    def __init__(self) -> None:
        self.prometheus = PrometheusSink(PrometheusConfig(enabled=True, port=0), serve=False)
        self.runs: dict[tuple[str, str], InMemorySink] = {}
        self.pipeline = Pipeline([self.prometheus], self._run_sinks)
        self.health = ScrapeHealth()

    def _run_sinks(self, experiment: str, trial: str) -> list[InMemorySink]:
        sink = self.runs[(experiment, trial)] = InMemorySink()
        return [sink]

    def loop(self, url: str, timeout_s: float = 5.0) -> TargetLoop:
        target = ScrapeTarget(url=url, experiment="exp", trial="t1")
        return TargetLoop(target, self.pipeline.deliver, self.health, timeout_s, 1 << 24)

    def families(self) -> dict[str, object]:
        assert self.pipeline.force_flush(30)
        body, _ = self.prometheus.render()
        return {f.name: f for f in text_string_to_metric_families(body.decode())}

    def figures(self) -> list[Snapshot]:
        assert self.pipeline.force_flush(30)
        return self.runs[("exp", "t1")].snapshots

    def close(self) -> None:
        self.pipeline.shutdown(10)


@pytest.fixture
def collector():
    built = Collector()
    yield built
    built.close()


def scrape_config(data: dict) -> ScrapeConfig:
    """The ``collector.scrape`` section as the collector's config validates it."""
    return validate(ScrapeConfig, data, "collector.scrape")


def _series(family, name: str, **labels) -> dict[tuple, float]:
    want = {(k, str(v)) for k, v in labels.items()}
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if s.name == name and want <= set(s.labels.items())
    }


def _figure(snapshot: Snapshot, name: str) -> float | None:
    for point in snapshot.points:
        if point.metric == "rollout_engine/" + name:
            return point.value
    return None


def test_vllm_series_keep_name_type_labels_and_buckets(collector):
    engine = Engine("vllm", engines=2)
    engine.get("generation", 1).inc(1234)
    engine.get("running", 1).set(5)
    for value in (0.003, 0.03, 0.3, 3000.0):
        engine.get("ttft", 1).observe(value)
    with serving(engine) as server:
        loop = collector.loop(server.url)
        assert loop.scrape_once()
        engine.get("ttft", 1).observe(0.07)
        engine.get("generation", 1).inc(10)
        assert loop.scrape_once()
        families = collector.families()
    run = {
        "experiment": "exp",
        "trial": "t1",
        "role": "rollout-engine",
        "instance": server.instance,
        "job": "rollout-engine",
    }
    tokens = families["vllm:generation_tokens"]
    assert tokens.type == "counter"
    assert _series(tokens, "vllm:generation_tokens_total", engine=1, **run) == {
        tuple(sorted({**run, "model_name": MODEL, "engine": "1"}.items())): 1244.0
    }
    assert families["vllm:num_requests_running"].type == "gauge"
    assert set(
        _series(families["vllm:num_requests_running"], "vllm:num_requests_running", **run).values()
    ) == {0.0, 5.0}
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    ours = _series(ttft, "vllm:time_to_first_token_seconds_bucket", engine=1, **run)
    served = {
        s.labels["le"]: s.value
        for f in text_string_to_metric_families(engine.exposition().decode())
        if f.name == "vllm:time_to_first_token_seconds"
        for s in f.samples
        if s.name.endswith("_bucket") and s.labels["engine"] == "1"
    }
    assert {dict(k)["le"]: v for k, v in ours.items()} == served
    assert served["0.08"] == 3.0 and served["+Inf"] == 5.0
    assert "vllm:generation_tokens_created" not in families  # the counter's start time
    prometheus_2 = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    body, _ = collector.prometheus.render(prometheus_2)  # OpenMetrics keeps the ':' too
    assert b"\nvllm:generation_tokens_total{" in body


def test_vllm_figures_rates_hit_rate_and_quantiles(collector):
    engine = Engine("vllm", engines=2)
    with serving(engine) as server:
        loop = collector.loop(server.url)
        before = time.monotonic()
        assert loop.scrape_once()
        after_first = time.monotonic()
        for e in (0, 1):
            engine.get("generation", e).inc(600)
            engine.get("prompt", e).inc(150)
            engine.get("running", e).set(3 + e)
            engine.get("waiting", e).set(10)
            engine.get("kv", e).set(0.25 + 0.5 * e)
        engine.get("prefix_queries", 0).inc(400)
        engine.get("prefix_hits", 0).inc(100)
        for value in (0.015, 0.015, 0.03, 0.03, 0.05, 0.07, 0.09, 0.2, 0.2, 3.0):
            engine.get("ttft", 0).observe(value)
        engine.get("tpot", 1).observe(0.02)
        engine.get("e2e", 1).observe(12.0)
        before_second = time.monotonic()
        assert loop.scrape_once()
        after = time.monotonic()
    first, second = collector.figures()
    assert first.step == Step(0, 0, 0)  # no training step yet
    assert _figure(first, "generation_tokens_per_s") is None  # no rate from one scrape
    assert _figure(second, "running_requests") == 7.0
    assert _figure(second, "waiting_requests") == 20.0
    assert _figure(second, "kv_cache_usage") == pytest.approx(0.5)
    rate = _figure(second, "generation_tokens_per_s")
    assert 1200.0 / (after - before) <= rate <= 1200.0 / (before_second - after_first)
    ratio = _figure(second, "prompt_tokens_per_s") / rate
    assert ratio == pytest.approx(0.25)
    assert _figure(second, "prefix_cache_hit_rate") == pytest.approx(0.25)
    # ten TTFTs: rank 5 lies in (0.04, 0.06] holding 1 -> 0.06; rank 9.9 in (2.5, 5] -> 4.75
    assert _figure(second, "time_to_first_token_p50") == pytest.approx(0.06)
    assert _figure(second, "time_to_first_token_p99") == pytest.approx(2.5 + 2.5 * 0.9)
    assert _figure(second, "inter_token_latency_p50") == pytest.approx(0.0175)
    assert _figure(second, "e2e_latency_p99") == pytest.approx(10.0 + 5.0 * 0.99)
    assert dict(second.points[0].attributes) == {"instance": server.instance}


def test_sglang_names_give_the_same_figures(collector):
    engine = Engine("sglang")
    with serving(engine) as server:
        loop = collector.loop(server.url)
        assert loop.scrape_once()
        engine.get("running").set(12)
        engine.get("waiting").set(4)
        engine.get("kv").set(0.9)
        engine.get("hit_rate").set(0.4)
        engine.get("generation").inc(1000)
        for value in (0.3, 0.5, 0.7, 0.9):
            engine.get("ttft").observe(value)
        assert loop.scrape_once()
        families = collector.families()
    second = collector.figures()[1]
    assert _figure(second, "running_requests") == 12.0
    assert _figure(second, "waiting_requests") == 4.0
    assert _figure(second, "kv_cache_usage") == pytest.approx(0.9)
    assert _figure(second, "prefix_cache_hit_rate") == pytest.approx(0.4)
    assert _figure(second, "generation_tokens_per_s") > 0
    assert _figure(second, "time_to_first_token_p50") == pytest.approx(0.6)
    assert families["sglang:generation_tokens"].type == "counter"
    assert families["sglang:inter_token_latency_seconds"].type == "histogram"
    labels = {"model_name", "engine_type", "tp_rank", "pp_rank", "experiment", "trial"}
    sample = families["sglang:num_queue_reqs"].samples[0]
    assert labels <= set(sample.labels)


def test_engine_restart_resets_counters_without_a_negative_rate(collector):
    engine = Engine("vllm")
    with serving(engine) as server:
        loop = collector.loop(server.url)
        engine.get("generation").inc(5000)
        for _ in range(4):
            engine.get("ttft").observe(0.03)
        before = time.monotonic()
        assert loop.scrape_once()
        after_first = time.monotonic()
        engine.restart()  # the engine restarted: its totals start again from 0
        engine.get("generation").inc(300)
        engine.get("ttft").observe(0.5)
        before_second = time.monotonic()
        assert loop.scrape_once()
        after = time.monotonic()
        families = collector.families()
    second = collector.figures()[1]
    rate = _figure(second, "generation_tokens_per_s")  # the restart's 300, not -4700
    assert 300.0 / (after - before) <= rate <= 300.0 / (before_second - after_first)
    assert _figure(second, "time_to_first_token_p50") == pytest.approx(0.375)
    counter = _series(families["vllm:generation_tokens"], "vllm:generation_tokens_total")
    assert list(counter.values()) == [300.0]  # the engine's own total: Prometheus sees the reset
    ttft = families["vllm:time_to_first_token_seconds"]
    count = _series(ttft, "vllm:time_to_first_token_seconds_count")
    assert list(count.values()) == [5.0]  # windows added: the histogram never goes down


def test_counter_reset_rate_is_the_new_total_over_the_interval():
    from collector.scrape.convert import Converter

    engine = Engine("vllm")
    converter = Converter()
    engine.get("generation").inc(900)
    converter.convert(engine.exposition().decode())
    engine.restart()
    engine.get("generation").inc(40)
    after_reset = converter.convert(engine.exposition().decode())
    assert after_reset.increases["vllm:generation_tokens"] == 40.0
    engine.get("generation").inc(2)
    assert (
        converter.convert(engine.exposition().decode()).increases["vllm:generation_tokens"] == 2.0
    )


def test_quantile_is_prometheus_histogram_quantile():
    window = Histogram("h", 4, 1.0, None, None, (1.0, 2.0, 4.0), (1, 1, 1, 1))
    assert quantile(0.5, window) == pytest.approx(2.0)  # rank 2: the top of (1, 2]
    assert quantile(0.25, window) == pytest.approx(1.0)
    assert quantile(0.3, window) == pytest.approx(1.2)
    assert quantile(0.99, window) == 4.0  # in +Inf: the highest bound
    assert math.isnan(quantile(0.5, Histogram("h", 0, 0.0, None, None, (1.0,), (0, 0))))


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "bad_text"),
        ("infinite", "bad_text"),
        ("hang", "timeout"),
        ("trickle", "timeout"),
        ("closed", "down"),
    ],
)
def test_a_failing_target_is_counted_and_logged_once_per_change(collector, caplog, mode, reason):
    caplog.set_level(logging.WARNING, logger="collector.scrape.health")
    with serving(mode="ok" if mode == "closed" else mode) as server:
        url = server.url
        if mode == "closed":
            server.close()
        loop = collector.loop(url, timeout_s=0.5)
        for _ in range(3):
            assert not loop.scrape_once()
        assert collector.health.up(url) == 0
        assert collector.health.failures(url)[reason] == 3
    lines = [r.getMessage() for r in caplog.records if url in r.getMessage()]
    assert len(lines) == 1 and reason in lines[0], lines
    assert collector.runs == {}  # nothing reached the pipeline


def test_a_hanging_and_a_garbage_target_never_stall_a_good_one(collector, tmp_path):
    engine = Engine("vllm")
    with serving(mode="hang") as hang, serving(mode="garbage") as garbage, serving(engine) as good:
        targets = [
            {"url": s.url, "experiment": "exp", "trial": "t1", "interval_s": 0.05}
            for s in (hang, garbage, good)
        ]
        config = scrape_config({"targets": targets, "timeout_s": 30.0})
        scraper = Scraper(config, collector.pipeline.deliver, collector.health)
        scraper.start()
        try:
            deadline = time.monotonic() + 60
            while good.requests < 5 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert good.requests >= 5, "the good target was not scraped on its own schedule"
            assert hang.requests == 1  # still inside its first scrape (30 s deadline)
            assert collector.health.up(good.url) == 1
            assert collector.health.up(hang.url) == 0
            assert collector.health.failures(garbage.url)["bad_text"] >= 1
        finally:
            hang.released.set()
            scraper.stop(10)


def test_two_thousand_series_reach_the_prometheus_sink(collector):
    engine = Engine("vllm", extra_series=2000)
    with serving(engine) as server:
        loop = collector.loop(server.url)
        assert loop.scrape_once()
        families = collector.families()
    extra = families["rltel_test:extra"]
    assert len(extra.samples) == 2000
    assert {s.value for s in extra.samples} == {float(i) for i in range(2000)}
    assert {s.labels["instance"] for s in extra.samples} == {server.instance}


def _write_targets(path, urls) -> None:
    path.write_text(yaml.safe_dump([{"url": u, "experiment": "exp", "trial": "t1"} for u in urls]))


def _wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_targets_file_is_reread_when_it_changes(collector, tmp_path):
    engine = Engine("vllm")
    path = tmp_path / "targets.yaml"
    with serving(engine) as first, serving(engine) as second:
        _write_targets(path, [first.url])
        config = ScrapeConfig(targets_file=str(path))
        scraper = Scraper(config, collector.pipeline.deliver, collector.health, file_check_s=0.05)
        scraper.start()
        try:
            assert set(scraper.targets()) == {first.url}
            _write_targets(path, [second.url])
            assert _wait_for(lambda: set(scraper.targets()) == {second.url})
            assert collector.health.up(first.url) is None  # removed: no `up` series left
            path.write_text("- url: ftp://nowhere\n  experiment: exp\n")
            assert _wait_for(lambda: collector.health.file_errors == 1)
            assert set(scraper.targets()) == {second.url}  # a bad version keeps the list
            path.unlink()
            assert _wait_for(lambda: scraper.targets() == {})
        finally:
            scraper.stop(10)


def test_scrape_config_errors_name_the_key():
    target = {"url": "http://127.0.0.1:1/metrics", "experiment": "exp", "trial": "t1"}
    with pytest.raises(ConfigError, match=r"collector\.scrape\.targets\.0\.url must be an http"):
        scrape_config({"targets": [{**target, "url": "ftp://x"}]})
    with pytest.raises(ConfigError, match=r"collector\.scrape\.targets\.0\.interval_s"):
        scrape_config({"targets": [{**target, "interval_s": 0.0}]})
    with pytest.raises(ConfigError, match=r"collector\.scrape\.targets\.0\.trial"):
        scrape_config({"targets": [{**target, "trial": "a/b"}]})
    with pytest.raises(ConfigError, match=r"collector\.scrape\.targets .*more than once"):
        scrape_config({"targets": [target, target]})
    assert scrape_config({"targets": [target]}).targets[0].role == "rollout-engine"


def test_newer_vllm_inter_token_latency_wins_over_time_per_output_token(collector):
    engine = Engine("vllm", itl=True)  # later vLLM releases serve both names
    with serving(engine) as server:
        loop = collector.loop(server.url)
        assert loop.scrape_once()
        engine.get("itl").observe(0.02)  # (0.01, 0.025]: p50 at 0.0175
        engine.get("tpot").observe(0.3)  # (0.2, 0.3]: p50 at 0.25
        assert loop.scrape_once()
    second = collector.figures()[1]
    assert _figure(second, "inter_token_latency_p50") == pytest.approx(0.0175)
