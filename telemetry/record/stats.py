"""AReaL's flat dict of an export (``Stats``), points for a plain flat dict, and whether a
dict still holds a point."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import COUNT_SUFFIX, Gauge, Point, ScalarMean, flatten
from telemetry.model.units import key_unit

__all__ = ["Stats", "holds", "points_from_flat"]


class Stats(dict):
    """The tracker's typed export: AReaL's flat dict (``__count`` included) plus its points.

    Behaves exactly like AReaL's ``dict[str, float]``; ``points`` keeps histogram and
    counter semantics for the OTel mapping. ``update`` with another ``Stats`` merges
    points too; plain values added by hand stay plain dict entries (exported as gauges).
    """

    def __init__(self, points: Iterable[Point] = ()) -> None:
        self.points: tuple[Point, ...] = tuple(points)
        super().__init__(flatten(self.points, include_counts=True))

    def update(self, other=(), /, **kwargs) -> None:  # type: ignore[override]
        if isinstance(other, Stats):
            mine = {point.key: point for point in self.points}
            mine.update((point.key, point) for point in other.points)
            self.points = tuple(mine.values())
        super().update(other, **kwargs)


def holds(data: Mapping[str, Any], point: Point) -> bool:
    """Whether ``data`` still holds every value ``point`` flattens to: the one rule by which a
    committed dict keeps an export's typed point (a histogram, a counter) instead of gauges.

    A value is held when it is a number equal to the point's exactly: an int, a float or a
    numpy scalar (``numbers.Real``; a bool never is), NaN holding NaN. A missing ``__count``
    key is held (a dict may drop AReaL's count companions); any other missing key is not.
    """
    for key, value in point.flat():
        if key not in data:
            if key.endswith(COUNT_SUFFIX):
                continue
            return False
        got = data[key]
        if isinstance(got, bool) or not isinstance(got, numbers.Real):
            return False
        got = float(got)
        if not (got == value or (math.isnan(got) and math.isnan(value))):
            return False
    return True


def points_from_flat(data: Mapping[str, float]) -> Iterator[Gauge | ScalarMean]:
    """Points for AReaL's plain dict: a key with a ``k__count`` entry is a scalar stream (a
    :class:`ScalarMean` of that count), any other a :class:`Gauge`; each has its key's unit
    (:func:`key_unit`), as the tracker exports it."""
    for key, value in data.items():
        if key.endswith(COUNT_SUFFIX):
            continue
        count = data.get(key + COUNT_SUFFIX)
        if count is None:
            yield Gauge(key, _as_float(key, value), unit=key_unit(key))
        else:
            yield ScalarMean(key, _as_float(key, value), int(count), key_unit(key))


def _as_float(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return float(value)  # numpy scalars, 0-d tensors
        except (TypeError, ValueError):
            raise InvalidValueError(
                f"{key!r}: expected a number, got {type(value).__name__}"
            ) from None
    return float(value)
