"""A plain dict merged from tracker exports commits like the typed Stats (AReaL's merges)."""

from __future__ import annotations

import math

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from exporters.base import InMemorySink
from exporters.prometheus import PrometheusSink
from rltel.logger import STEP_METRIC, StatsLogger
from telemetry import stats_tracker
from telemetry.config import PrometheusConfig
from telemetry.metrics.train_perf import TrainPerf
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean
from telemetry.record import typed_keys


@pytest.fixture(autouse=True)
def clean():
    stats_tracker.export_all()
    typed_keys.clear()
    yield
    stats_tracker.export_all()


def record_step(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(4, 8, generator=g) < 0.7
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        stats_tracker.denominator(n_valid_tokens=mask)
        stats_tracker.stat(ratio=torch.rand(4, 8, generator=g) * 2, denominator="n_valid_tokens")
        stats_tracker.scalar(grad_norm=1.5)
    with stats_tracker.record_timing("train_step"):
        pass
    stats_tracker.get("rollout").scalar(reward=0.25)


def logger_and_sink(tmp_path) -> tuple[StatsLogger, InMemorySink]:
    sink = InMemorySink()
    config = {"experiment_name": "e", "trial_name": "t", "fileroot": str(tmp_path)}
    return StatsLogger(config, sinks=[sink]), sink


def by_key(snapshot) -> dict:
    return {p.key: p for p in snapshot.points if p.key != STEP_METRIC}


@pytest.fixture
def buckets():
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        stats_tracker.set_bucket_bounds("ratio", [0.5, 1.0, 1.5])
    yield
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        stats_tracker.set_bucket_bounds("ratio", None)


def test_merged_copied_and_updated_dicts_commit_the_typed_points(tmp_path, buckets):
    perf = TrainPerf(None)
    with perf.measure(attention_mask=torch.ones(2, 5, dtype=torch.bool)):
        record_step(0)
    typed = stats_tracker.export_all()
    perf.close()
    stats_logger, sink = logger_and_sink(tmp_path)
    stats_logger.commit(0, 0, 1, typed)
    actor = {k: v for k, v in typed.items() if not k.startswith("rollout/")}
    rollout = {k: v for k, v in typed.items() if k.startswith("rollout/")}
    merged = {**actor, **rollout}  # AReaL's PPOTrainer merges exports into a plain dict
    merged.update({"my/lr": 1e-5})  # plus a scalar of the user's own
    stats_logger.commit(0, 1, 2, merged)
    copied = dict(typed)
    stats_logger.commit(0, 2, 3, copied)
    stats_logger.close()
    first, second, third = (by_key(s) for s in sink.snapshots)
    assert second.pop("my/lr") == Gauge("my/lr", 1e-5)
    assert second == first and third == first
    ratio = first["ppo_actor/update/ratio"]
    assert isinstance(ratio, Histogram) and ratio.bounds == (0.5, 1.0, 1.5)
    assert sum(ratio.bucket_counts) == ratio.count > 0
    assert first["timeperf/train_step"].unit == "s"
    assert isinstance(first["train_perf/total_tokens"], Counter)


def test_a_changed_value_is_committed_as_the_users_gauge(tmp_path):
    record_step(1)
    stats = dict(stats_tracker.export_all())
    stats["ppo_actor/update/ratio/max"] = 99.0  # the user overrides one key of a histogram
    del stats["ppo_actor/update/grad_norm__count"]  # and drops a count companion
    stats_logger, sink = logger_and_sink(tmp_path)
    stats_logger.commit(0, 0, 1, stats)
    stats_logger.close()
    points = by_key(sink.snapshots[0])
    assert points["ppo_actor/update/ratio/max"] == Gauge("ppo_actor/update/ratio/max", 99.0)
    assert isinstance(points["ppo_actor/update/ratio/avg"], Gauge)  # no histogram behind 99
    assert points["ppo_actor/update/grad_norm"].count == 1  # the typed scalar, count kept
    assert sink.snapshots[0].flat() == {
        **{k: v for k, v in stats.items() if not k.endswith("__count")},
        STEP_METRIC: 1.0,
    }


def test_nan_values_still_match_their_point():
    typed_keys.remember([ScalarMean("x", math.nan, 2)])
    (point,) = typed_keys.points_for({"x": math.nan, "x__count": 2})
    assert point.count == 2


def test_prometheus_names_from_a_plain_dict_equal_the_typed_ones(tmp_path, buckets):
    def exposition(data) -> set[str]:
        stats_logger, memory = logger_and_sink(tmp_path)
        stats_logger.commit(0, 0, 1, data)
        stats_logger.close()
        sink = PrometheusSink(PrometheusConfig(port=0))
        try:
            sink.export(memory.snapshots[0])
            body, _ = sink.render()
        finally:
            sink.shutdown()
        return {
            sample.name
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
            if not sample.name.startswith("rltel_")
        }

    record_step(2)
    typed = stats_tracker.export_all()
    plain = {**typed}
    assert exposition(plain) == exposition(typed)
    names = exposition(plain)
    assert "timeperf_train_step_seconds" in names
    assert {"ppo_actor_update_ratio_bucket", "ppo_actor_update_ratio_count"} <= names
