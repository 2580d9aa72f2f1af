"""The straggler view: which keys get it, its settings, and the points that carry it.

For a tracked key the DP reduction also compares each rank's own value (a timing's
mean, a count, ``train_perf``'s tokens and seconds; see ``StateLayout.per_rank``) without
gathering the values (:mod:`telemetry.record.stragglers`), and exports:

* ``<key>/rank_min``, ``<key>/rank_max``, ``<key>/slowest_rank`` (the lowest rank holding
  the max);
* where the reduction spans more than one rank, the k slowest ranks (k = ``top_k``,
  default 8): ``<key>/top_k/rank`` and ``<key>/top_k/value`` gauges with attribute
  ``place`` (1 = slowest; flat keys ``<key>/top_k/place_<i>/rank``), and the chronic
  stragglers: the k ranks most often in the top k over the last ``history`` exports
  (default 50) that had the key, ``<key>/chronic/rank`` and ``<key>/chronic/top_k_exports``
  (how many of them) by ``place``, and ``<key>/chronic/exports`` (how many exports the
  counts span). A rank always slow has a count near the span; a one-off has 1.

That is ``3 + 4k + 1`` series per quantity whatever the number of ranks (ranks are group
ranks of the reduction). Tracked by default: every ``timeperf/<name>`` timing and
``train_perf`` (``train_perf/tokens/...``, ``train_perf/seconds/...``); :func:`track_ranks`
adds patterns, :func:`straggler_view` changes k, the history and the slot count.

Where a dashboard needs every rank, :func:`rank_series` names keys that also get one
``<key>/per_rank`` gauge per rank (attribute ``rank``): the values are gathered to the
group's first rank (the committing one) only, which alone exports them, up to
``max_series`` values per reduction (default 4096; keys past it get none, and one warning).
"""

from __future__ import annotations

import fnmatch
import math
import threading

from telemetry.model.snapshot import Gauge, Point
from telemetry.model.units import TIMING_SCOPE, key_unit
from telemetry.record import stragglers
from telemetry.record.layout import StateLayout
from telemetry.record.stragglers import RankSpread

__all__ = [
    "DEFAULT_PATTERNS",
    "RankSpread",
    "rank_series",
    "series",
    "spread_points",
    "straggler_view",
    "track_ranks",
    "tracked",
    "untrack_ranks",
]

DEFAULT_PATTERNS = (f"{TIMING_SCOPE}/*", f"*/{TIMING_SCOPE}/*", "train_perf")
_lock = threading.Lock()
_patterns: list[str] = list(DEFAULT_PATTERNS)
_series_patterns: list[str] = []
_memo: dict[str, tuple[bool, bool]] = {}
_MEMO_KEYS = 65536


def track_ranks(*patterns: str) -> None:
    """Export the straggler view of keys matching any of ``patterns`` (fnmatch syntax).

    Every rank must track the same patterns (the view is computed on every rank).
    """
    with _lock:
        _patterns.extend(p for p in patterns if p not in _patterns)
        _memo.clear()


def untrack_ranks(*patterns: str) -> None:
    """Stop tracking ``patterns`` (defaults included)."""
    with _lock:
        _patterns[:] = [p for p in _patterns if p not in patterns]
        _memo.clear()


def rank_series(*patterns: str, enabled: bool = True) -> None:
    """Also export one gauge per rank for keys matching ``patterns`` (which are tracked),
    on the group's first rank.

    ``enabled=False`` stops it. Every rank must name the same patterns.
    """
    with _lock:
        if enabled:
            _series_patterns.extend(p for p in patterns if p not in _series_patterns)
            _patterns.extend(p for p in patterns if p not in _patterns)
        else:
            _series_patterns[:] = [p for p in _series_patterns if p not in patterns]
        _memo.clear()


def straggler_view(
    top_k: int | None = None,
    history: int | None = None,
    slots: int | None = None,
    max_series: int | None = None,
) -> stragglers.Settings:
    """Change the view's settings (``None`` keeps one); return them.

    ``top_k``: ranks named per quantity (default 8); ``history``: exports the chronic
    counts span (default 50); ``slots``: the first round's slots (default 64; see
    :class:`~telemetry.record.stragglers.Settings`); ``max_series``: per-rank
    series values per reduction (default 4096). Every rank must make the same change.
    """
    changes = {"top_k": top_k, "history": history, "slots": slots, "max_series": max_series}
    return stragglers.configure(**{k: v for k, v in changes.items() if v is not None})


def _view(key: str) -> tuple[bool, bool]:
    """Whether ``key`` is tracked, and whether it gets per-rank series (memoised per key
    until the patterns change: every export asks for every key)."""
    found = _memo.get(key)  # one dict read: atomic, no lock
    if found is None:
        with _lock:
            if len(_memo) >= _MEMO_KEYS:
                _memo.clear()
            found = _memo[key] = (
                any(fnmatch.fnmatchcase(key, p) for p in _patterns),
                any(fnmatch.fnmatchcase(key, p) for p in _series_patterns),
            )
    return found


def tracked(key: str) -> bool:
    """Whether ``key`` gets the straggler view."""
    return _view(key)[0]


def series(key: str) -> bool:
    """Whether ``key`` gets per-rank series (:func:`rank_series`)."""
    return _view(key)[1]


def spread_points(key: str, spreads: dict[str, RankSpread], layout: StateLayout) -> list[Point]:
    """The straggler view of each quantity of ``key`` as gauges (module docstring), in the
    quantity's unit: its ``PerRank.unit`` in ``layout``, else the key's (``key_unit``)."""
    units = {q.suffix: q.unit for q in layout.per_rank}
    points: list[Point] = []
    for suffix, spread in sorted(spreads.items()):
        base = f"{key}/{suffix}" if suffix else key
        unit = units.get(suffix) or key_unit(key)
        points += [
            Gauge(f"{base}/rank_min", spread.low, unit=unit),
            Gauge(f"{base}/rank_max", spread.high, unit=unit),
            Gauge(f"{base}/slowest_rank", float(spread.slowest_rank)),
        ]
        for place, (rank, value) in enumerate(spread.top, 1):
            at = (("place", place),)
            points += [
                Gauge(f"{base}/top_k/rank", float(rank), attributes=at),
                Gauge(f"{base}/top_k/value", value, unit=unit, attributes=at),
            ]
        for place, (rank, count) in enumerate(spread.chronic, 1):
            at = (("place", place),)
            points += [
                Gauge(f"{base}/chronic/rank", float(rank), attributes=at),
                Gauge(f"{base}/chronic/top_k_exports", float(count), attributes=at),
            ]
        if spread.chronic:
            points.append(Gauge(f"{base}/chronic/exports", float(spread.exports)))
        points += [
            Gauge(f"{base}/per_rank", value, unit=unit, attributes=(("rank", rank),))
            for rank, value in enumerate(spread.values)
            if not math.isnan(value)  # a rank without a value has no series
        ]
    return points
