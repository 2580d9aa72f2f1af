"""Point constructors for the collector's decoder hot path (~10^5 points/s)."""

from __future__ import annotations

from collections.abc import Callable

from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean

__all__ = ["trusted_counter", "trusted_gauge", "trusted_histogram", "trusted_scalar_mean"]

# Trusted constructors for hot paths (the collector's decoder builds ~10^5 points/s). A
# frozen dataclass' ``__init__`` sets each field through ``object.__setattr__``; these fill
# the same slots with plain stores, then turn the instance into the real class (the slot
# layouts are identical, so ``__class__`` may be assigned). The result is an ordinary
# frozen point, equal to one built with the public constructor. Every field is positional
# and nothing is validated: the caller guarantees the invariants (for a histogram,
# ``bucket_counts`` has ``len(bounds) + 1`` entries or both are empty).


class _GaugeSlots:
    __slots__ = Gauge.__slots__

    def __init__(self, metric, value, unit, attributes) -> None:
        self.metric, self.value, self.unit, self.attributes = metric, value, unit, attributes
        self.__class__ = Gauge  # type: ignore[assignment]


class _ScalarMeanSlots:
    __slots__ = ScalarMean.__slots__

    def __init__(self, metric, value, count, unit, attributes) -> None:
        self.metric, self.value, self.count = metric, value, count
        self.unit, self.attributes = unit, attributes
        self.__class__ = ScalarMean  # type: ignore[assignment]


class _CounterSlots:
    __slots__ = Counter.__slots__

    def __init__(self, metric, value, unit, attributes, start_time_unix_nano) -> None:
        self.metric, self.value, self.unit = metric, value, unit
        self.attributes, self.start_time_unix_nano = attributes, start_time_unix_nano
        self.__class__ = Counter  # type: ignore[assignment]


class _HistogramSlots:
    __slots__ = Histogram.__slots__

    def __init__(
        self, metric, count, sum, min, max, bounds, bucket_counts, reduce, unit, attributes
    ) -> None:
        self.metric, self.count, self.sum, self.min, self.max = metric, count, sum, min, max
        self.bounds, self.bucket_counts, self.reduce = bounds, bucket_counts, reduce
        self.unit, self.attributes = unit, attributes
        self.__class__ = Histogram  # type: ignore[assignment]


trusted_gauge: Callable[..., Gauge] = _GaugeSlots  # type: ignore[assignment]
"""``Gauge(metric, value, unit=unit, attributes=attributes)``, all four positional."""
trusted_scalar_mean: Callable[..., ScalarMean] = _ScalarMeanSlots  # type: ignore[assignment]
"""``ScalarMean(metric, value, count, unit, attributes)``: every field positional."""
trusted_counter: Callable[..., Counter] = _CounterSlots  # type: ignore[assignment]
"""``Counter(metric, value, unit, attributes, start_time_unix_nano)``: every field positional."""
trusted_histogram: Callable[..., Histogram] = _HistogramSlots  # type: ignore[assignment]
"""``Histogram(...)`` with all ten fields positional and without the bucket check."""
