"""The straggler view: which keys get a per-rank spread, and the points that carry it.

For a tracked key the DP reduction also compares each rank's own value (a timing's
mean, a count, ``train_perf``'s tokens and seconds; see ``StateLayout.per_rank``) and
exports ``<key>/rank_min``, ``<key>/rank_max`` and ``<key>/slowest_rank`` (the rank
holding the max), from the payload it gathers anyway: no extra collective, and three
series per key whatever the number of ranks. Tracked by default: every
``timeperf/<name>`` timing and ``train_perf`` (``train_perf/tokens/...``,
``train_perf/seconds/...``); :func:`track_ranks` adds patterns.

Where a dashboard needs every rank, :func:`rank_series` names keys that also get one
``<key>/rank_<r>/per_rank`` gauge per rank (attribute ``rank``), for jobs of at most
``MAX_RANK_SERIES`` ranks (a larger job gets the three aggregate series only, and one
warning): the number of series stays bounded whatever the job size.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import threading

from telemetry.model.snapshot import Gauge, Point
from telemetry.record.reduce import RankSpread

__all__ = [
    "DEFAULT_PATTERNS",
    "RankSpread",
    "spread_points",
    "track_ranks",
    "tracked",
    "untrack_ranks",
]

DEFAULT_PATTERNS = ("timeperf/*", "*/timeperf/*", "train_perf")
MAX_RANK_SERIES = 256
_log = logging.getLogger(__name__)
_lock = threading.Lock()
_patterns: list[str] = list(DEFAULT_PATTERNS)
_series_patterns: list[str] = []
_warned: set[str] = set()


def track_ranks(*patterns: str) -> None:
    """Export the per-rank spread of keys matching any of ``patterns`` (fnmatch syntax).

    Every rank must track the same patterns (the spread is computed on every rank).
    """
    with _lock:
        _patterns.extend(p for p in patterns if p not in _patterns)


def untrack_ranks(*patterns: str) -> None:
    """Stop tracking ``patterns`` (defaults included)."""
    with _lock:
        _patterns[:] = [p for p in _patterns if p not in patterns]


def rank_series(*patterns: str, enabled: bool = True) -> None:
    """Also export one gauge per rank for keys matching ``patterns`` (which are tracked).

    ``enabled=False`` stops it. Every rank must name the same patterns.
    """
    with _lock:
        if enabled:
            _series_patterns.extend(p for p in patterns if p not in _series_patterns)
            _patterns.extend(p for p in patterns if p not in _patterns)
        else:
            _series_patterns[:] = [p for p in _series_patterns if p not in patterns]


def tracked(key: str) -> bool:
    """Whether ``key`` gets a per-rank spread."""
    with _lock:
        patterns = tuple(_patterns)
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def spread_points(key: str, spreads: dict[str, RankSpread]) -> list[Point]:
    """``rank_min``, ``rank_max`` and ``slowest_rank`` gauges of each quantity of ``key``,
    and its per-rank gauges where :func:`rank_series` asked for them."""
    with _lock:
        series = any(fnmatch.fnmatchcase(key, p) for p in _series_patterns)
    points: list[Point] = []
    for suffix, spread in sorted(spreads.items()):
        base = f"{key}/{suffix}" if suffix else key
        unit = "s" if base.endswith("seconds") or "timeperf/" in base else ""
        points += [
            Gauge(f"{base}/rank_min", spread.low, unit=unit),
            Gauge(f"{base}/rank_max", spread.high, unit=unit),
            Gauge(f"{base}/slowest_rank", float(spread.slowest_rank)),
        ]
        if series and len(spread.values) > MAX_RANK_SERIES:
            if base not in _warned:
                _warned.add(base)
                _log.warning(
                    "%s: %d ranks, more than MAX_RANK_SERIES=%d: per-rank series left out",
                    base,
                    len(spread.values),
                    MAX_RANK_SERIES,
                )
        elif series:
            points += [
                Gauge(f"{base}/per_rank", value, unit=unit, attributes=(("rank", rank),))
                for rank, value in enumerate(spread.values)
                if not math.isnan(value)
            ]
    return points
