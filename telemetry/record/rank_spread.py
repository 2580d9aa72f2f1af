"""The straggler view: which keys get a per-rank spread, and the points that carry it.

For a tracked key the DP reduction also compares each rank's own value (a timing's
mean, a count, ``train_perf``'s tokens and seconds; see ``StateLayout.per_rank``) and
exports ``<key>/rank_min``, ``<key>/rank_max`` and ``<key>/slowest_rank`` (the rank
holding the max), from the payload it gathers anyway: no extra collective, and three
series per key whatever the number of ranks. Tracked by default: every
``timeperf/<name>`` timing and ``train_perf`` (``train_perf/tokens/...``,
``train_perf/seconds/...``); :func:`track_ranks` adds patterns.
"""

from __future__ import annotations

import fnmatch
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
_lock = threading.Lock()
_patterns: list[str] = list(DEFAULT_PATTERNS)


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


def tracked(key: str) -> bool:
    """Whether ``key`` gets a per-rank spread."""
    with _lock:
        patterns = tuple(_patterns)
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def spread_points(key: str, spreads: dict[str, RankSpread]) -> list[Point]:
    """``rank_min``, ``rank_max`` and ``slowest_rank`` gauges of each quantity of ``key``."""
    points: list[Point] = []
    for suffix, spread in sorted(spreads.items()):
        base = f"{key}/{suffix}" if suffix else key
        unit = "s" if base.endswith("seconds") or "timeperf/" in base else ""
        points += [
            Gauge(f"{base}/rank_min", spread.low, unit=unit),
            Gauge(f"{base}/rank_max", spread.high, unit=unit),
            Gauge(f"{base}/slowest_rank", float(spread.slowest_rank)),
        ]
    return points
