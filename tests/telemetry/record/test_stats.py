"""The unit of a recorded key, the same for the tracker's points, a plain dict's and the report;
the one rule by which a dict still holds a point."""

from __future__ import annotations

import numpy as np
import pytest

from telemetry.model.snapshot import Counter, Gauge, ScalarMean
from telemetry.model.units import key_unit
from telemetry.record.layout import SCALAR_LAYOUT
from telemetry.record.points import point_for
from telemetry.record.stats import holds, points_from_flat


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("timeperf/train_step", "s"),
        ("ppo_actor/timeperf/update", "s"),
        ("mytimeperf/x", ""),
        ("ppo_actor/update/timeperf", ""),
    ],
)
def test_timeperf_keys_are_in_seconds_both_ways(key: str, unit: str):
    assert key_unit(key) == unit
    assert list(points_from_flat({key: 0.5, f"{key}__count": 2})) == [ScalarMean(key, 0.5, 2, unit)]
    values = np.array([1.0, 2.0, 0.5, -0.5])  # [sum, count, min, -max]
    assert point_for(key, SCALAR_LAYOUT, values, ()) == ScalarMean(key, 0.5, 2, unit)


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("timeperf/train_step", "time (s)"),
        ("ppo_actor/timeperf/update", "time (s)"),
        ("mytimeperf/x", "value (unit of the key)"),
        ("perf/e2e_seconds", "time (s)"),
    ],
)
def test_the_report_axis_follows_the_same_unit_rule(key: str, label: str):
    from rltel.report.rank_figure import unit_of

    assert unit_of(key) == label


SCALAR = ScalarMean("loss", 0.25, 4)


@pytest.mark.parametrize(
    ("data", "held"),
    [
        ({"loss": 0.25, "loss__count": 4}, True),
        ({"loss": 0.25}, True),  # a missing __count is held
        ({"loss__count": 4}, False),  # any other missing key is not
        ({"loss": 0.25, "loss__count": 5}, False),
        ({"loss": 0.25, "loss__count": 4.0}, True),
        ({"loss": 0.25, "loss__count": np.int64(4)}, True),
        ({"loss": np.float32(0.25), "loss__count": 4}, True),  # exact in float32
        ({"loss": np.float64(0.25)}, True),
        ({"loss": 0.25000000000000006}, False),  # compared exactly, no tolerance
        ({"loss": "0.25"}, False),
        ({"loss": None}, False),
    ],
)
def test_a_dict_holds_a_point_with_every_value_exactly_the_same(data, held):
    assert holds(data, SCALAR) is held


def test_a_float32_that_is_not_the_points_float_is_not_held():
    assert not holds({"x": np.float32(0.1)}, Gauge("x", 0.1))
    assert holds({"x": np.float32(0.1)}, Gauge("x", float(np.float32(0.1))))


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)])
def test_a_bool_never_holds_a_number(flag):
    assert not holds({"done": flag}, Counter("done", float(flag)))


def test_nan_holds_nan_and_nothing_else():
    nan = float("nan")
    assert holds({"kl": nan}, Gauge("kl", nan))
    assert holds({"kl": np.float32(nan)}, Gauge("kl", nan))
    assert not holds({"kl": 0.0}, Gauge("kl", nan))
    assert not holds({"kl": nan}, Gauge("kl", 0.0))
