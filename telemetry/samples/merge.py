"""One stream's kept samples from many parts (ranks, exports) under the same bounds.

Each part is a :class:`~telemetry.model.sample_window.Drained`: a uniform reservoir of its
``seen`` samples plus its reward extremes. The union keeps:

- a uniform reservoir of the union's ``sum(seen)`` samples: each of ``reservoir`` picks
  takes the next not yet taken sample of part ``p`` with probability
  ``left_p / sum(left)``, ``left_p`` the samples of ``p`` not yet picked (the draw
  without replacement from the union, so the result is again uniform and parts can be
  merged again);
- the ``extremes`` lowest and highest rewards over every part's kept samples (the
  union's extremes are among the parts' extremes);

so a merge never holds more than one part's bound, whatever the number of parts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from telemetry.model.sample import Sample
from telemetry.model.sample_window import Drained

Position = tuple[int, int]
"""A sample's part and its index in that part's ``samples``."""


def merge_stream(
    parts: Sequence[Drained],
    reservoir: int,
    extremes: int,
    reward_key: str,
    rng: random.Random,
) -> Drained:
    """The parts of one stream as one :class:`Drained` (in part order, then logged order).

    Raises:
        ValueError: the parts are of different streams, or there are none.
    """
    streams = {part.stream for part in parts}
    if len(streams) != 1:
        raise ValueError(f"merge_stream: one stream expected, got {sorted(streams)}")
    if len(parts) == 1:
        return parts[0]
    uniform = _uniform(parts, reservoir, rng)
    kept = sorted(set(uniform) | set(_extremes(parts, extremes, reward_key)))
    samples = tuple(parts[p].samples[i] for p, i in kept)
    index = {position: n for n, position in enumerate(kept)}
    return Drained(
        parts[0].stream,
        samples,
        sum(part.seen for part in parts),
        sum(1 for sample in samples if sample.truncated),
        tuple(sorted(index[position] for position in uniform)),
    )


def _uniform(parts: Sequence[Drained], size: int, rng: random.Random) -> list[Position]:
    pools = []
    for p, part in enumerate(parts):
        pool = [(p, i) for i in part.uniform]
        rng.shuffle(pool)
        pools.append(pool)
    left = [part.seen for part in parts]
    picked: list[Position] = []
    while len(picked) < size and sum(left) > 0:
        r = rng.randrange(sum(left))
        p = 0
        while r >= left[p]:
            r -= left[p]
            p += 1
        left[p] -= 1
        if pools[p]:
            picked.append(pools[p].pop())
        else:  # a part that kept fewer than it saw (another bound): nothing more of it
            left[p] = 0
    return picked


def _extremes(parts: Sequence[Drained], k: int, reward_key: str) -> list[Position]:
    rated: list[tuple[float, Position]] = []
    for p, part in enumerate(parts):
        for i, sample in enumerate(part.samples):
            reward = _reward(sample, reward_key)
            if reward is not None:
                rated.append((reward, (p, i)))
    if not k:
        return []
    rated.sort()
    return [position for _, position in rated[:k] + rated[-k:]]


def _reward(sample: Sample, reward_key: str) -> float | None:
    reward = sample.number(reward_key)
    return None if reward is None or math.isnan(reward) else reward
