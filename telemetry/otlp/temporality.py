"""Per-series temporality state: cumulative histograms to windows, delta sums to totals.

The Snapshot model wants histogram points as windows (deltas) and counters as cumulative
totals. Senders may send either temporality, so the collector keeps the last cumulative
value of each histogram series and the running total of each delta sum series.

A cumulative series whose ``start_time_unix_nano`` moved forward, or whose count went
down, was restarted (a worker restart): its new value is a window of its own, never a
negative delta. The first point of a cumulative series is emitted as a window only if the
series started after this collector did (``start_time_unix_nano >= started_ns``); an older
series (the collector restarted under a running sender) only sets the baseline, as the
OpenTelemetry Collector's ``cumulativetodelta`` processor does in its ``auto`` mode.

A non-finite sum is kept as sent, and a window's sum is plain float arithmetic: after a
sender's running sum turned NaN or infinite, its windows' sums are NaN or infinite too
(counts and buckets stay exact). The Prometheus sink keeps such windows out of its
cumulative series, as it does a trainer's.

A collector with its durable state keeps these states across a restart
(:mod:`collector.baselines`), and with them the start of its first process: a series it
held goes on from its kept baseline, and a series that started after the first process did
and was never acknowledged is a window of its own, so only a series older than every
process of the collector loses its first point.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HistogramState:
    """One histogram data point's totals, as received (cumulative) or as a window (delta)."""

    start_time_unix_nano: int
    count: int
    sum: float
    min: float | None
    max: float | None
    bounds: tuple[float, ...]
    bucket_counts: tuple[int, ...]


def histogram_window(
    previous: HistogramState | None, current: HistogramState, started_ns: int
) -> HistogramState | None:
    """The window between two cumulative points of one series; None when nothing is new.

    Args:
        previous: the series' last cumulative point, or None for its first point.
        current: the point just received.
        started_ns: when the collector started (epoch ns): decides the first point's fate.

    Min and max of a window are known only where the cumulative min/max moved (the new
    extreme lies in this window); otherwise they are None.
    """
    if previous is None:
        fresh = current.start_time_unix_nano > 0 and current.start_time_unix_nano >= started_ns
        return current if fresh else None
    if (
        current.start_time_unix_nano > previous.start_time_unix_nano
        or current.count < previous.count
    ):
        return current  # the sender restarted: everything since its new start is new
    count = current.count - previous.count
    if count == 0:
        zeros = (0,) * len(current.bucket_counts)
        return HistogramState(
            current.start_time_unix_nano, 0, 0.0, None, None, current.bounds, zeros
        )
    buckets: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    if (
        current.bounds == previous.bounds
        and len(current.bucket_counts) == len(previous.bucket_counts)
        and current.bucket_counts
    ):
        diff = tuple(c - p for c, p in zip(current.bucket_counts, previous.bucket_counts))
        if min(diff) >= 0:
            buckets, bounds = diff, current.bounds
    low = current.min if _moved(current.min, previous.min, lower=True) else None
    high = current.max if _moved(current.max, previous.max, lower=False) else None
    return HistogramState(
        current.start_time_unix_nano,
        count,
        current.sum - previous.sum,
        low,
        high,
        bounds,
        buckets,
    )


def _moved(current: float | None, previous: float | None, lower: bool) -> bool:
    if current is None:
        return False
    if previous is None:
        return True
    return current < previous if lower else current > previous


@dataclass(slots=True)
class SumState:
    """The running total of a delta sum series and the start of its first point."""

    start_time_unix_nano: int
    total: float
