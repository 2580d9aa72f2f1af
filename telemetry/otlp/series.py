"""The decoder's per-series temporality state, with staged changes and series limits.

Cumulative histograms and delta sums need the previous point of their series
(:mod:`telemetry.otlp.temporality`). A request's changes are staged over the kept state
and applied by :meth:`SeriesTable.commit` only, so a request refused after decoding leaves
no trace (a retried delta is not counted twice). The number of series is bounded per
metric name and in total; a series past a bound is rejected, never kept.

The kept state can be read out (:meth:`SeriesTable.items`, and :meth:`SeriesTable.commit`
returns what one request changed) and put back (:meth:`SeriesTable.restore`), so that a
collector can keep it across a restart; the table itself does no file I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from telemetry.otlp.temporality import HistogramState, SumState
from telemetry.otlp.values import Rejected

__all__ = ["SeriesState", "SeriesTable"]

SeriesState = HistogramState | SumState


class SeriesTable:
    """Series key -> last state, with one request's changes staged on top; not thread-safe.

    Args:
        max_series_per_metric: series kept per metric name.
        max_series_total: series kept over all metrics.
    """

    def __init__(self, max_series_per_metric: int, max_series_total: int) -> None:
        self.max_series_per_metric = max_series_per_metric
        self.max_series_total = max_series_total
        self._state: dict[tuple, SeriesState] = {}
        self._per_metric: dict[str, int] = {}
        self._overlay: dict[tuple, SeriesState] = {}  # staged changes
        self._added: dict[str, int] = {}  # staged new series per metric
        self._new = 0  # staged new series

    def __len__(self) -> int:
        """Series kept (staged ones not counted)."""
        return len(self._state)

    def get(self, key: tuple) -> SeriesState | None:
        """The series' state, staged or kept; ``None`` for a new series."""
        staged = self._overlay.get(key)
        return staged if staged is not None else self._state.get(key)

    def put(self, key: tuple, state: SeriesState) -> None:
        """Stage a new state of a known series."""
        self._overlay[key] = state

    def add(self, key: tuple, metric: str, state: SeriesState) -> SeriesState:
        """Stage a new series of ``metric``, within the limits; returns ``state``.

        Raises:
            Rejected: the metric's or the total series limit is reached.
        """
        added = self._added.get(metric, 0)
        if self._per_metric.get(metric, 0) + added >= self.max_series_per_metric:
            raise Rejected(f"series limit {self.max_series_per_metric} reached")
        if len(self._state) + self._new >= self.max_series_total:
            raise Rejected(f"total series limit {self.max_series_total} reached")
        self._added[metric] = added + 1
        self._new += 1
        self._overlay[key] = state
        return state

    def commit(self) -> dict[tuple, SeriesState]:
        """Keep the staged changes; returns them (series key -> its new state)."""
        changed = self._overlay
        self._state.update(changed)
        for metric, n in self._added.items():
            self._per_metric[metric] = self._per_metric.get(metric, 0) + n
        self.discard()
        return changed

    def items(self) -> list[tuple[tuple, SeriesState]]:
        """A copy of the kept series (staged ones not included)."""
        return list(self._state.items())

    def restore(self, items: Iterable[tuple[tuple, SeriesState]]) -> int:
        """Replace the kept series with ``items`` (from :meth:`items`), within the limits;
        returns how many were left out (past a limit, or not a series key).

        A series' key is ``(kind, resource, metric name, attributes)``.
        """
        self._state, self._per_metric = {}, {}
        self.discard()
        left_out = 0
        for key, state in items:
            metric = key[2] if len(key) == 4 and isinstance(key[2], str) else None
            if (
                metric is None
                or self._per_metric.get(metric, 0) >= self.max_series_per_metric
                or len(self._state) >= self.max_series_total
            ):
                left_out += 1
                continue
            if key not in self._state:
                self._per_metric[metric] = self._per_metric.get(metric, 0) + 1
            self._state[key] = state
        return left_out

    def discard(self) -> None:
        """Drop the staged changes."""
        self._overlay, self._added, self._new = {}, {}, 0
