"""OTel -> Prometheus naming: sanitizing, units, counters, collisions, labels."""

from __future__ import annotations

import itertools
import re

import pytest

from exporters.prometheus.naming import (
    MetricKey,
    histogram_gauge_names,
    label_name,
    labels_from_attributes,
    metric_name,
    resolve_names,
    sample_names,
    sanitize,
    unit_suffix,
)

VALID = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ppo_actor/update/loss", "ppo_actor_update_loss"),
        ("a//b..c", "a_b_c"),
        ("moe_balance/layer_3/max_over_ideal", "moe_balance_layer_3_max_over_ideal"),
        ("3d/thing", "_3d_thing"),
        ("ns:sub-name", "ns:sub_name"),
        ("ünïcode", "_n_code"),
        ("", "_"),
    ],
)
def test_sanitize(raw, expected):
    assert sanitize(raw) == expected
    assert VALID.match(sanitize(raw))


@pytest.mark.parametrize(
    ("unit", "kind", "expected"),
    [
        ("s", "gauge", "seconds"),
        ("ms", "counter", "milliseconds"),
        ("{token}", "counter", ""),
        ("{flop}", "gauge", ""),
        ("{token}/s", "gauge", "per_second"),
        ("By/s", "gauge", "bytes_per_second"),
        ("1", "gauge", "ratio"),
        ("1", "counter", ""),
        ("1", "histogram", ""),
        ("%", "gauge", "percent"),
        ("", "gauge", ""),
    ],
)
def test_unit_suffix(unit, kind, expected):
    assert unit_suffix(unit, kind) == expected


@pytest.mark.parametrize(
    ("metric", "kind", "unit", "expected"),
    [
        ("ppo_actor/update/loss", "histogram", "", "ppo_actor_update_loss"),
        ("timeperf/train_step", "gauge", "s", "timeperf_train_step_seconds"),
        ("timeperf/train_step_seconds", "gauge", "s", "timeperf_train_step_seconds"),
        ("train_perf/tokens", "counter", "{token}", "train_perf_tokens_total"),
        ("train_perf/tokens_total", "counter", "{token}", "train_perf_tokens_total"),
        ("train_perf/time", "counter", "s", "train_perf_time_seconds_total"),
        ("train_perf/time_total", "counter", "s", "train_perf_time_seconds_total"),
        ("train_perf/flops", "counter", "{flop}", "train_perf_flops_total"),
        ("train_perf/tokens_per_second", "gauge", "{token}/s", "train_perf_tokens_per_second"),
        ("moe_balance/max_over_ideal", "gauge", "1", "moe_balance_max_over_ideal_ratio"),
        ("ppo_actor/train_infer/kl", "histogram", "1", "ppo_actor_train_infer_kl"),
    ],
)
def test_metric_name(metric, kind, unit, expected):
    assert metric_name(metric, kind, unit) == expected


def test_histogram_companions_and_samples():
    assert histogram_gauge_names("x") == {"avg": "x_avg", "min": "x_min", "max": "x_max"}
    assert set(sample_names("x", "histogram")) >= {"x", "x_bucket", "x_count", "x_sum", "x_avg"}
    assert set(sample_names("x_total", "counter")) == {"x_total", "x", "x_created"}


def test_collision_gauge_total_vs_counter():
    gauge = MetricKey("x/total", "gauge")
    counter = MetricKey("x", "counter")
    names = resolve_names([gauge, counter])
    assert names[counter] == "x_total"  # counters are named first
    assert names[gauge] == "x_total_gauge"


def test_collision_histogram_companion_vs_gauge():
    hist = MetricKey("loss", "histogram")
    count = MetricKey("loss/count", "gauge")
    avg = MetricKey("loss/avg", "gauge")
    names = resolve_names([count, avg, hist])
    assert names[hist] == "loss"
    assert names[count] == "loss_count_gauge"
    assert names[avg] == "loss_avg_gauge"


def test_collision_same_kind_and_counter_rename_keeps_total():
    a, b, c = MetricKey("a/b", "counter"), MetricKey("a.b", "counter"), MetricKey("a-b", "counter")
    names = resolve_names([a, b, c])
    assert sorted(names.values()) == ["a_b_counter_2_total", "a_b_counter_total", "a_b_total"]
    # "a-b" < "a.b" < "a/b": the first in that order keeps the plain name
    assert (names[c], names[b], names[a]) == (
        "a_b_total",
        "a_b_counter_total",
        "a_b_counter_2_total",
    )


def test_resolution_is_order_independent_and_collision_free():
    keys = [
        MetricKey("x", "counter"),
        MetricKey("x/total", "gauge"),
        MetricKey("x", "histogram"),
        MetricKey("x/count", "gauge"),
        MetricKey("x_bucket", "gauge"),
        MetricKey("x", "gauge"),
        MetricKey("y", "gauge", "s"),
        MetricKey("y/seconds", "gauge"),
    ]
    reference = resolve_names(keys, reserved=["target_info"])
    for perm in itertools.permutations(keys[:6]):
        assert resolve_names([*perm, *keys[6:]], reserved=["target_info"]) == reference
    occupied = [n for k, name in reference.items() for n in sample_names(name, k.kind)]
    assert len(occupied) == len(set(occupied))
    assert all(VALID.match(name) for name in reference.values())


def test_reserved_names_are_avoided():
    key = MetricKey("target/info", "gauge")
    assert resolve_names([key], reserved=["target_info"])[key] == "target_info_gauge"


def test_labels():
    assert label_name("layer") == "layer"
    assert label_name("__name__") == "key_name_"
    assert label_name("9lives") == "key_9lives"
    assert label_name("a.b") == "a_b"
    labels = labels_from_attributes([("layer", 3), ("a.b", "x"), ("a_b", "y"), ("ok", True)])
    assert labels == {"layer": "3", "a_b": "x;y", "ok": "true"}
