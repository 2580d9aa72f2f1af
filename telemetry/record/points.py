"""Points from reduced states: the last step of a tracker's export."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from telemetry.model.snapshot import Gauge, Histogram, Point, ScalarMean
from telemetry.model.units import key_unit
from telemetry.record.layout import Reduced, StateKind, StateLayout

__all__ = ["point_for", "tracker_points"]

_log = logging.getLogger(__name__)
_warned_bounds: set[str] = set()


def tracker_points(reduced: Reduced, bounds: Mapping[str, tuple[float, ...]]) -> list[Point]:
    """A tracker's points of its reduced states, by key; ``bounds`` are its bucket bounds
    by key (none for a tracker that only other ranks used)."""
    points: list[Point] = []
    for key, (layout, values) in sorted(reduced.items()):
        point = point_for(key, layout, values, bounds.get(key, ()))
        if point is not None:
            points.append(point)
    return points


def point_for(
    key: str, layout: StateLayout, values: np.ndarray, bounds: tuple[float, ...]
) -> Point | None:
    """The point of one reduced state: a denominator's count, a scalar stream's mean (with
    its count) or a masked stat's histogram; None for a scalar stream without values.

    ``bounds`` are the key's bucket bounds on this rank; buckets whose bounds were set on
    other ranks only are dropped here, with one warning per key.
    """
    if layout.kind is StateKind.DENOMINATOR:
        return Gauge(key, float(values[0]))
    total, count, low, negated_high = (float(v) for v in values[:4])
    n = int(count)
    if layout.kind is StateKind.SCALAR:
        return ScalarMean(key, total / count, n, key_unit(key)) if n > 0 else None
    buckets = tuple(int(c) for c in values[4:])
    if buckets and len(bounds) + 1 != len(buckets):  # bounds set on other ranks only
        if key not in _warned_bounds:
            _warned_bounds.add(key)
            _log.warning("%r: bucket bounds are set on other ranks only; buckets dropped here", key)
        bounds, buckets = (), ()
    return Histogram(
        key,
        count=n,
        sum=total,
        min=low if n > 0 else None,
        max=-negated_high if n > 0 else None,
        bounds=bounds,
        bucket_counts=buckets,
        reduce=layout.reduce,
    )
