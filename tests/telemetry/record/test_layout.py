"""A state's layout (telemetry/record/layout.py): what each kind accepts, the description
ranks compare, and the state of a rank that recorded nothing."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from telemetry.model.snapshot import StatReduce
from telemetry.record.comm import Comm
from telemetry.record.layout import (
    DENOMINATOR_LAYOUT,
    SCALAR_LAYOUT,
    STAT_OPS,
    ReduceOp,
    StateKind,
    StateLayout,
    stat_layout,
)
from telemetry.record.stragglers import Stragglers, quantities

SUM, MIN, MAX = ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("stat", STAT_OPS), "needs a StateKind and ReduceOps"),
        ((StateKind.CUSTOM, ("sum",)), "needs a StateKind and ReduceOps"),
        ((StateKind.STAT, STAT_OPS), "a stat's layout needs a stat reduce type, got None"),
        ((StateKind.STAT, STAT_OPS, (), StatReduce.SCALAR), "needs a stat reduce type"),
        ((StateKind.STAT, (SUM, SUM, MIN), (), StatReduce.AVG), "a stat's ops are"),
        ((StateKind.STAT, (*STAT_OPS, MIN), (), StatReduce.AVG), "a stat's ops are"),
        ((StateKind.STAT, (SUM, SUM, SUM, MIN), (), StatReduce.AVG), "a stat's ops are"),
        ((StateKind.SCALAR, STAT_OPS, (), StatReduce.AVG), "only a stat's layout has a reduce"),
        ((StateKind.SCALAR, (SUM, SUM)), "a scalar state's ops are"),
        ((StateKind.DENOMINATOR, STAT_OPS), "a denominator state's ops are"),
    ],
    ids=[
        "kind-not-a-kind",
        "op-not-an-op",
        "stat-without-reduce",
        "stat-reduce-scalar",
        "stat-too-few-ops",
        "stat-bucket-not-a-sum",
        "stat-min-as-sum",
        "scalar-with-reduce",
        "scalar-ops",
        "denominator-ops",
    ],
)
def test_a_layout_that_does_not_fit_its_kind_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        StateLayout(*args)


def test_each_kind_describes_what_tells_layouts_apart():
    assert stat_layout(StatReduce.AVG, 2).description == "stat(reduce=avg, buckets=2)"
    assert stat_layout(StatReduce.SUM, 0).description == "stat(reduce=sum, buckets=0)"
    assert SCALAR_LAYOUT.description == "scalar"
    assert DENOMINATOR_LAYOUT.description == "denominator"
    assert StateLayout(StateKind.CUSTOM, (SUM, MAX, MIN)).description == "custom[sum,max,min]"


def test_a_stats_bucket_count_is_its_ops_past_the_four_moments():
    assert stat_layout(StatReduce.AVG_MIN_MAX, 3).n_buckets == 3
    assert stat_layout(StatReduce.AVG_MIN_MAX, 3).ops == (*STAT_OPS, SUM, SUM, SUM)
    assert stat_layout(StatReduce.AVG_MIN_MAX, 0).n_buckets == 0
    assert stat_layout(StatReduce.AVG, 5).n_buckets == 5
    assert StateLayout(StateKind.CUSTOM, (SUM,) * 6).n_buckets == 0  # only a stat has buckets


def test_a_rank_that_recorded_nothing_holds_each_ops_identity():
    layout = StateLayout(StateKind.CUSTOM, (SUM, MIN, MAX))
    assert layout.identity().tolist() == [0.0, math.inf, -math.inf]
    assert stat_layout(StatReduce.AVG, 1).identity().tolist() == [0.0, 0.0, math.inf, math.inf, 0.0]


def test_a_ranks_value_in_the_spread_is_a_mean_or_a_count():
    """A stat's and a scalar's value is sum / count, none without a count (whatever the
    sign of the sum or the minimum); a denominator's is its count."""
    layouts = {"x": stat_layout(StatReduce.AVG, 0), "s": SCALAR_LAYOUT, "n": DENOMINATOR_LAYOUT}
    offsets = {"x": 0, "s": 4, "n": 8}
    flat = torch.tensor([-6.0, 3.0, -4.0, 0.0, 0.0, 0.0, math.inf, math.inf, 5.0])
    qs = quantities(list(layouts), layouts, offsets, len(flat), lambda key: True, lambda key: False)
    values = Stragglers(Comm(None), qs, flat.to(torch.float64)).values.tolist()
    assert values[0] == -2.0 and math.isnan(values[1]) and values[2] == 5.0


def test_a_stat_layout_is_built_once_per_reduce_type_and_bucket_count():
    assert stat_layout(StatReduce.AVG, 2) is stat_layout(StatReduce.AVG, 2)


def test_a_layout_cannot_be_changed_once_made():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCALAR_LAYOUT.ops = (SUM,)  # type: ignore[misc]


def test_layouts_compare_by_kind_ops_spread_and_reduce_type():
    assert stat_layout(StatReduce.AVG, 5) == StateLayout(
        StateKind.STAT, (*STAT_OPS, *(SUM,) * 5), SCALAR_LAYOUT.per_rank, StatReduce.AVG
    )
