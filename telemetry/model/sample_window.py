"""One stream's samples of one step: a uniform reservoir plus the lowest and highest rewards.

The one bound of kept samples, applied where they are logged (:mod:`telemetry.samples`) and
again where the collector receives them (:mod:`collector.samples`).

The reservoir is Vitter's algorithm R: the ``i``-th sample replaces a random slot with
probability ``reservoir / i``, so every sample logged in the step is kept with the same
probability. The extremes are two bounded heaps on the reward field. A sample is built
(redacted, truncated) only when one of the three keeps it, so the caller pays for that
only ``O(reservoir * log(n) + extremes * log(n))`` times in ``n`` calls (random order).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from telemetry.model.sample import Sample

Build = Callable[[], Sample]


@dataclass(frozen=True, slots=True)
class Drained:
    """What one stream kept in one step, and its counts.

    Attributes:
        stream: the stream's name.
        samples: every kept sample once, in the order logged.
        seen: samples logged in the step.
        truncated: kept samples with a text field cut at the limit.
        uniform: the indices in ``samples`` of the uniform reservoir's samples (the others
            are kept as reward extremes only); a merge of parts needs them.
    """

    stream: str
    samples: tuple[Sample, ...]
    seen: int
    truncated: int
    uniform: tuple[int, ...] = ()


class StreamWindow:
    """The kept samples of one stream since the last drain (not thread-safe: the buffer
    holds the lock)."""

    def __init__(self, stream: str, reservoir: int, extremes: int, rng: random.Random) -> None:
        self.stream = stream
        self._size, self._extremes, self._rng = reservoir, extremes, rng
        self.seen = 0
        self._reservoir: list[tuple[int, Sample]] = []
        self._low: list[tuple[float, int, Sample]] = []  # max-heap of the lowest (-reward)
        self._high: list[tuple[float, int, Sample]] = []  # min-heap of the highest

    def offer(self, reward: float | None, build: Build) -> None:
        """Count one sample; keep it (``build()``, called at most once) where it belongs."""
        self.seen += 1
        seq = self.seen
        built: Sample | None = None

        def sample() -> Sample:
            nonlocal built
            if built is None:
                built = build()
            return built

        if len(self._reservoir) < self._size:
            self._reservoir.append((seq, sample()))
        elif self._size:
            slot = self._rng.randrange(seq)
            if slot < self._size:
                self._reservoir[slot] = (seq, sample())
        if reward is None or math.isnan(reward) or not self._extremes:
            return
        if len(self._low) < self._extremes:
            heapq.heappush(self._low, (-reward, seq, sample()))
        elif reward < -self._low[0][0]:
            heapq.heapreplace(self._low, (-reward, seq, sample()))
        if len(self._high) < self._extremes:
            heapq.heappush(self._high, (reward, seq, sample()))
        elif reward > self._high[0][0]:
            heapq.heapreplace(self._high, (reward, seq, sample()))

    def drain(self) -> Drained:
        """The kept samples in the order they were logged (each once), and the counts."""
        kept = {seq: sample for seq, sample in self._reservoir}
        kept.update((seq, sample) for _, seq, sample in (*self._low, *self._high))
        order = sorted(kept)
        samples = tuple(kept[seq] for seq in order)
        truncated = sum(1 for sample in samples if sample.truncated)
        in_reservoir = {seq for seq, _ in self._reservoir}
        uniform = tuple(n for n, seq in enumerate(order) if seq in in_reservoir)
        return Drained(self.stream, samples, self.seen, truncated, uniform)
