"""The points of a committed dict: the typed points of its export it still holds, then the rest."""

from __future__ import annotations

from telemetry.model.snapshot import Point, flatten
from telemetry.record.stats import Stats, holds, points_from_flat

__all__ = ["stats_points"]


def stats_points(stats: Stats) -> tuple[Point, ...]:
    """The export's typed points the dict still holds unchanged, and a gauge or scalar mean
    (:func:`points_from_flat`) for every other entry: a value changed, added or removed after
    the export (``stats[k] = v``, ``stats.update(rollout_stats)``, ``del stats[k]``) logs as
    the dict holds it, as in AReaL."""
    kept = [point for point in stats.points if holds(stats, point)]
    covered = set(flatten(kept, include_counts=True))
    return (*kept, *points_from_flat({k: v for k, v in stats.items() if k not in covered}))
