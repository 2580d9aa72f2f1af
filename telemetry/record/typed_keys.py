"""Typed points of recent exports by flat key, so a plain dict commits like the typed one.

AReaL code merges exports before committing (``{**actor_stats, **rollout_stats}``,
``stats.update(...)``): the result is a plain ``dict`` and the typed points of
:class:`~telemetry.model.snapshot.Stats` (histograms, counters, units) are gone. Every tracker
export is remembered here by key; :func:`points_for` turns a plain dict back into points,
taking a remembered point wherever the dict still holds exactly the values that point
produced, and a plain gauge for everything else (values the user added or changed).

Memory is bounded by the number of distinct keys ever exported (one point per key).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from telemetry.model.snapshot import Point
from telemetry.record.stats import holds, points_from_flat

__all__ = ["clear", "points_for", "remember"]

_lock = threading.Lock()
_by_key: dict[str, Point] = {}  # flat key (count keys included) -> the point that made it


def remember(points: Iterable[Point]) -> None:
    """Keep ``points`` (one export's) as the latest typed source of their flat keys."""
    with _lock:
        for point in points:
            for key, _ in point.flat():
                _by_key[key] = point


def clear() -> None:
    """Forget every remembered point (tests)."""
    with _lock:
        _by_key.clear()


def points_for(data: Mapping[str, Any]) -> tuple[Point, ...]:
    """Points for AReaL's plain dict ``data``, re-attaching remembered typed points.

    A remembered point is used when ``data`` still holds it
    (:func:`~telemetry.record.stats.holds`: every key it flattens to with the same number, a
    ``__count`` companion only if present); otherwise its keys become plain gauges, like any
    key no export produced.

    Raises:
        InvalidValueError: a value is not a number (names the key).
    """
    with _lock:
        owners = {key: _by_key.get(key) for key in data}
    points: list[Point] = []
    used: set[str] = set()
    seen: set[int] = set()
    for point in owners.values():
        if point is None or id(point) in seen:
            continue
        seen.add(id(point))
        if holds(data, point):
            points.append(point)
            used.update(k for k, _ in point.flat() if k in data)
    rest = {key: value for key, value in data.items() if key not in used}
    points.extend(points_from_flat(rest))
    return tuple(points)
