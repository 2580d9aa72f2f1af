"""Snapshot points: the trusted constructors build the same frozen points as the public ones."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, StatReduce
from telemetry.otlp.fast_points import (
    trusted_counter,
    trusted_gauge,
    trusted_histogram,
    trusted_scalar_mean,
)

CASES = [
    (trusted_scalar_mean, ScalarMean("rollout/reward", 0.25, 8, "1", (("worker", 3),))),
    (
        trusted_gauge,
        Gauge("moe_balance/max_over_ideal", 1.25, unit="1", attributes=(("layer", 3),)),
    ),
    (trusted_gauge, Gauge("lr", 1e-6)),
    (trusted_counter, Counter("train_perf/tokens", 1234.0, "{token}", (("rank", 0),), 7)),
    (
        trusted_histogram,
        Histogram("ppo_actor/update/loss", 10, 5.0, -1.0, 2.0, (0.0, 1.0), (3, 5, 2)),
    ),
    (trusted_histogram, Histogram("ppo_actor/entropy", 4, 8.0, 1.0, 3.0, reduce=StatReduce.AVG)),
    (trusted_histogram, Histogram("ppo_actor/empty", 0, 0.0)),
]


@pytest.mark.parametrize(("build", "reference"), CASES, ids=lambda c: getattr(c, "metric", ""))
def test_trusted_constructor_equals_public_one(build, reference):
    # every field positional, in declaration order: a new field breaks this call
    point = build(*(getattr(reference, f.name) for f in dataclasses.fields(reference)))
    assert type(point) is type(reference)
    assert point == reference and hash(point) == hash(reference)
    assert repr(point) == repr(reference)
    assert list(point.flat()) == list(reference.flat())
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.metric = "other"
    assert pickle.loads(pickle.dumps(point)) == reference
    assert copy.deepcopy(point) == reference
    changed = dataclasses.replace(point, metric="other")
    assert type(changed) is type(reference) and changed.metric == "other"


def test_public_histogram_constructor_still_checks_buckets():
    with pytest.raises(ValueError, match="2 bounds need 3 bucket counts"):
        Histogram("h", 3, 1.0, 0.0, 1.0, (0.0, 1.0), (3,))


def test_a_gauge_carries_no_count():
    with pytest.raises(TypeError):
        Gauge("ppo_actor/update/grad_norm", 1.5, count=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Gauge("ppo_actor/update/grad_norm", 1.5, 4)  # type: ignore[misc]
    assert not hasattr(Gauge("lr", 1e-6), "count")


def test_flat_form_of_a_scalar_mean_and_a_gauge():
    scalar = ScalarMean("rollout/reward", 0.25, 8, attributes=(("task", "math"),))
    assert list(scalar.flat()) == [
        ("rollout/task_math/reward", 0.25),
        ("rollout/task_math/reward__count", 8),
    ]
    assert list(Gauge("lr", 1e-6).flat()) == [("lr", 1e-6)]
