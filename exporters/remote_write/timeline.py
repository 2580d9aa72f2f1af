"""Sample timestamps of the remote-write sink: commit time, in order per series.

A receiver (Prometheus, Mimir, Thanos Receive) refuses a sample older than its series' last
one, and refuses the whole request with it, so every series' timestamps must increase. The
:class:`Timeline` remembers each series' last written timestamp: a sample at or before it
is written 1 ms after it instead, and counted (``late``). A sample equal to its series' last
one (same timestamp, same value bit for bit) is that sample again, a step replayed from the
journal and resent by its trainer: it is not written a second time.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterable, Iterator, Mapping

from prometheus_client.metrics_core import Metric

from exporters.remote_write import proto

Key = tuple[tuple[str, str], ...]
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus's staleness marker: the NaN that ends a series (as a scrape writes for a series
that left the target)."""


class Timeline:
    """Labels and timestamps of the samples the sink writes; not thread-safe (the sink's
    lock guards it).

    Args:
        external: labels added to every series (a series' own label of the same name wins).
    """

    def __init__(self, external: Mapping[str, str]) -> None:
        self.external = dict(external)
        self._last: dict[Key, int] = {}
        self._last_value: dict[Key, bytes] = {}  # the value written at _last (its bits)
        self._seen: set[Key] = set()
        self.late = 0

    def __len__(self) -> int:
        return len(self._last)

    def stamp(
        self, families: Iterable[Metric], at_ms: int, extra: Mapping[str, str] | None = None
    ) -> list[proto.Sample]:
        """Every sample of ``families`` at ``at_ms`` (or just after its series' last one).

        Args:
            families: the families whose samples to write.
            at_ms: their time, Unix milliseconds (the commit time of a snapshot).
            extra: labels for series that lack them (``job``/``instance`` of self-metrics).
        """
        return [
            self._at(key, value, at_ms)
            for key, value in self._keys(families, extra)
            if not self._written(key, value, at_ms)
        ]

    def idle(
        self,
        families: Iterable[Metric],
        now_ms: int,
        idle_ms: int | None,
        extra: Mapping[str, str] | None = None,
    ) -> list[proto.Sample]:
        """The samples of series not written within ``idle_ms`` (None: every series), at
        ``now_ms`` (or just after their last one); series not seen before count as idle.
        Each series is remembered as live until :meth:`forget_unseen`."""
        out = []
        for key, value in self._keys(families, extra):
            self._seen.add(key)
            last = self._last.get(key)
            if idle_ms is None or last is None or now_ms - last >= idle_ms:
                out.append(self._at(key, value, now_ms))
        return out

    def ended(self, keys: Collection[Key], now_ms: int) -> list[proto.Sample]:
        """A staleness marker (:data:`STALE`) at ``now_ms`` (or just after its last sample)
        for each series of ``keys`` that was written before."""
        return [self._at(key, STALE, now_ms) for key in keys if key in self._last]

    def last(self) -> dict[Key, int]:
        """Each series' last written timestamp (ms): kept for the next process."""
        return dict(self._last)

    def take_up(self, last: dict[Key, int]) -> None:
        """Continue after an earlier process that wrote up to ``last``."""
        for key, ts in last.items():
            self._last[key] = max(ts, self._last.get(key, ts))
            self._seen.add(key)

    def forget_unseen(self) -> None:
        """Forget every series :meth:`idle` did not see since the last call (expired ones)."""
        seen = self._seen
        self._last = {key: ts for key, ts in self._last.items() if key in seen}
        self._last_value = {key: v for key, v in self._last_value.items() if key in seen}
        self._seen = set()

    def _written(self, key: Key, value: float, at_ms: int) -> bool:
        """Whether ``key``'s last written sample is ``value`` at ``at_ms``."""
        return self._last.get(key) == at_ms and self._last_value.get(key) == _bits(value)

    def _at(self, key: Key, value: float, at_ms: int) -> proto.Sample:
        last = self._last.get(key)
        if last is not None and at_ms <= last:
            at_ms = last + 1
            self.late += 1
        self._last[key] = at_ms
        self._last_value[key] = _bits(value)
        return key, value, at_ms

    def _keys(
        self, families: Iterable[Metric], extra: Mapping[str, str] | None
    ) -> Iterator[tuple[Key, float]]:
        base = {**self.external, **extra} if extra else self.external
        for family in families:
            for sample in family.samples:
                labels = {**base, **sample.labels, "__name__": sample.name}
                yield tuple(sorted(labels.items())), float(sample.value)


def _bits(value: float) -> bytes:
    """``value``'s bits: equal for the same NaN (a staleness marker is not another NaN)."""
    return struct.pack("<d", value)
