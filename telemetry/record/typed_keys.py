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

import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from telemetry.model.snapshot import COUNT_SUFFIX, Point
from telemetry.record.stats import points_from_flat

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

    A remembered point is used when every non-count key it flattens to is in ``data``
    with the same value (a ``__count`` companion, if present, must match too); otherwise
    its keys become plain gauges, like any key no export produced.

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
        expected = dict(point.flat())
        if _unchanged(expected, data):
            points.append(point)
            used.update(k for k in expected if k in data)
    rest = {key: value for key, value in data.items() if key not in used}
    points.extend(points_from_flat(rest))
    return tuple(points)


def _unchanged(expected: Mapping[str, float], data: Mapping[str, Any]) -> bool:
    for key, value in expected.items():
        if key not in data:
            if key.endswith(COUNT_SUFFIX):
                continue
            return False
        if not _same(value, data[key]):
            return False
    return bool(expected)


def _same(expected: float, got: Any) -> bool:
    if isinstance(got, bool):
        return False
    try:
        got = float(got)
    except (TypeError, ValueError):
        return False
    return got == expected or (math.isnan(got) and math.isnan(expected))
