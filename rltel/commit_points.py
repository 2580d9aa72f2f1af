"""The points of a committed dict: the export's typed points it still holds, gauges for the rest."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from telemetry.model.snapshot import COUNT_SUFFIX, Point, flatten
from telemetry.record.stats import Stats, points_from_flat

__all__ = ["stats_points"]


def stats_points(stats: Stats) -> tuple[Point, ...]:
    """The export's typed points the dict still holds unchanged, and gauges for every other
    entry: a value changed, added or removed after the export (``stats[k] = v``,
    ``stats.update(rollout_stats)``, ``del stats[k]``) logs as the dict holds it, as in AReaL."""
    kept = [point for point in stats.points if _holds(stats, point)]
    covered = set(flatten(kept, include_counts=True))
    return (*kept, *points_from_flat({k: v for k, v in stats.items() if k not in covered}))


def _holds(data: Mapping[str, Any], point: Point) -> bool:
    """``data`` holds every value ``point`` flattens to (a missing ``__count`` is fine)."""
    for key, value in point.flat():
        if key not in data:
            if key.endswith(COUNT_SUFFIX):
                continue
            return False
        got = data[key]
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return False
        if not (got == value or (math.isnan(got) and math.isnan(value))):
            return False
    return True
