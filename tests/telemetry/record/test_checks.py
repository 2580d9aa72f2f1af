"""What the tracker refuses, checked where it is decided (telemetry/record/checks.py): each
refusal names the key; each value next to a refused one is accepted."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.errors import InvalidValueError, ShapeMismatchError
from telemetry.record import checks
from telemetry.record.tracker import DistributedStatsTracker
from tests.distributed import run_ranks


@pytest.mark.parametrize(
    "bounds",
    [(), (1.0, math.inf), (math.nan,), (1.0, 1.0), (2.0, 1.0), (0.0, 2.0, 1.0)],
    ids=["none", "infinite", "nan", "equal", "decreasing", "decreasing-later"],
)
def test_bucket_bounds_must_be_increasing_finite_numbers(bounds):
    with pytest.raises(InvalidValueError, match="'k': bucket bounds must be increasing finite"):
        checks.bucket_bounds("k", bounds)


def test_increasing_finite_bucket_bounds_are_taken_as_floats():
    assert checks.bucket_bounds("k", [-1, 0.5, 2]) == (-1.0, 0.5, 2.0)


def test_a_stat_of_fewer_elements_than_its_mask_is_refused_by_name():
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ShapeMismatchError, match=r"'x': shape \(2, 2\) does not match"):
        checks.stat_value("x", torch.ones(2, 2), mask, "m")


def test_a_stat_on_another_device_than_its_mask_is_refused_by_name():
    mask = torch.ones(3, dtype=torch.bool)
    value = torch.ones(3)
    assert checks.stat_value("x", value, mask, "m") is value  # cpu and cpu: two objects
    with pytest.raises(InvalidValueError, match="'x': tensor on meta, denominator 'm' on cpu"):
        checks.stat_value("x", torch.ones(3, device="meta"), mask, "m")


def test_bucket_counts_of_too_few_elements_are_refused_by_name():
    with pytest.raises(InvalidValueError, match="'x': expected a float64 bucket-count vector"):
        checks.moment_buckets("x", torch.zeros(2, dtype=torch.float64), 3)


@pytest.mark.parametrize(
    "rows",
    [
        torch.zeros(2, 4, dtype=torch.float32),  # the right shape, another dtype
        torch.zeros(3, 4, dtype=torch.float64),  # a row too many
        torch.zeros(2, 5, dtype=torch.float64),  # a column too many
    ],
    ids=["float32", "extra-row", "extra-column"],
)
def test_moment_rows_must_be_float64_with_one_row_of_four_per_key(rows):
    with pytest.raises(InvalidValueError, match=r"'a': expected float64 states of shape \(2, 4\)"):
        checks.moment_rows(["a", "b"], rows)


def test_a_scalar_tensor_needs_exactly_one_element():
    with pytest.raises(
        InvalidValueError, match=r"scalar 'lr': expected one element, got shape \(0,\)"
    ):
        checks.scalar_value("lr", torch.ones(0))


def test_a_scalar_array_must_be_zero_dimensional():
    assert checks.scalar_value("lr", np.array(1.5)) == 1.5
    with pytest.raises(InvalidValueError, match=r"scalar 'lr': expected a number or a 0-d array"):
        checks.scalar_value("lr", np.array([1.5]))


def _record_with_groups(rank: int, world: int) -> dict[str, float]:
    tracker = DistributedStatsTracker()
    tracker.scalar(x=1.0, reduce_group=dist.group.WORLD)
    tracker.scalar(y=2.0, reduce_group=dist.new_group([0]))
    return dict(tracker.export())


def test_a_process_group_is_taken_as_a_keys_reduce_group():
    """On a one-rank world: the world group and a new group are accepted for a key."""
    (exported,) = run_ranks(_record_with_groups, 1)
    assert exported == {"x": 1.0, "x__count": 1, "y": 2.0, "y__count": 1}
