"""The unit of a recorded key, the same for the tracker's points, a plain dict's and the report."""

from __future__ import annotations

import numpy as np
import pytest

from telemetry.model.snapshot import Gauge
from telemetry.model.units import key_unit
from telemetry.record.layout import SCALAR_LAYOUT
from telemetry.record.points import point_for
from telemetry.record.stats import points_from_flat


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
    assert list(points_from_flat({key: 0.5, f"{key}__count": 2})) == [Gauge(key, 0.5, 2, unit)]
    values = np.array([1.0, 2.0, 0.5, -0.5])  # [sum, count, min, -max]
    assert point_for(key, SCALAR_LAYOUT, values, ()) == Gauge(key, 0.5, 2, unit)


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
