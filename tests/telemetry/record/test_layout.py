"""A state's layout (telemetry/record/layout.py): what each kind accepts, the description
ranks compare, and the state of a rank that recorded nothing."""

from __future__ import annotations

import math

import pytest

from telemetry.model.snapshot import StatReduce
from telemetry.record.layout import (
    DENOMINATOR_LAYOUT,
    SCALAR_LAYOUT,
    STAT_OPS,
    ReduceOp,
    StateKind,
    StateLayout,
    stat_layout,
)

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
    assert StateLayout(StateKind.CUSTOM, (SUM,) * 6).n_buckets == 0  # only a stat has buckets


def test_a_rank_that_recorded_nothing_holds_each_ops_identity():
    layout = StateLayout(StateKind.CUSTOM, (SUM, MIN, MAX))
    assert layout.identity().tolist() == [0.0, math.inf, -math.inf]
    assert stat_layout(StatReduce.AVG, 1).identity().tolist() == [0.0, 0.0, math.inf, math.inf, 0.0]
