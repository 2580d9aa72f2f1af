"""What a state is: the typed spec the DP reduction compares across ranks.

Every producer's states reach the DP reduction (:func:`telemetry.record.reduce.reduce_states`,
through :func:`telemetry.record.export.reduce_sources`) as
``key -> (StateLayout, 1-D float64 tensor)``. The layout says what the state holds
(:class:`StateKind`, plus the stat's reduce type where it has one) and which
:class:`ReduceOp` combines each element across calls and ranks.

Two enums, two questions: :class:`ReduceOp` is how one *element* of a state is combined
(``sum``/``min``/``max``: the arithmetic of the reduction); the reduce type
(:class:`~telemetry.model.snapshot.StatReduce`, AReaL's ``ReduceType``) is how a recorded
*key* appears in AReaL's flat dict. A masked stat is the same ``[sum, count, min, -max]``
state (ops ``sum, sum, min, min``) whatever its reduce type; only its points differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from typing import NamedTuple

import numpy as np
import torch

from telemetry.model.snapshot import StatReduce

__all__ = [
    "DENOMINATOR_LAYOUT",
    "SCALAR_LAYOUT",
    "STAT_OPS",
    "PerRank",
    "ReduceOp",
    "Reduced",
    "State",
    "StateKind",
    "StateLayout",
    "stat_layout",
]


class ReduceOp(str, Enum):
    """The reduction of one state element across calls and ranks."""

    SUM = "sum"
    MIN = "min"
    MAX = "max"


_IDENTITY = {ReduceOp.SUM: 0.0, ReduceOp.MIN: float("inf"), ReduceOp.MAX: float("-inf")}


class StateKind(Enum):
    """What a state holds, and so who turns it into points."""

    STAT = "stat"
    """A masked statistic ``[sum, count, min, -max, *bucket_counts]`` (tracker ``stat``)."""
    SCALAR = "scalar"
    """A scalar stream ``[sum, count, min, -max]`` (tracker ``scalar``)."""
    DENOMINATOR = "denominator"
    """A mask's valid count ``[count]`` (tracker ``denominator``)."""
    CUSTOM = "custom"
    """A state source's own elements (MoE counts, train_perf, Twinkle); it builds the points."""


class PerRank(NamedTuple):
    """A quantity of one rank's state, for the per-rank spread (the straggler view).

    Its value is element ``numerator`` (divided by element ``denominator`` if given); a
    rank takes part only where element ``present`` (if given) is positive. Its points
    have ``unit`` ("": the key's own unit, :func:`telemetry.model.units.key_unit`).
    """

    suffix: str
    numerator: int
    denominator: int | None = None
    present: int | None = None
    unit: str = ""


STAT_OPS = (ReduceOp.SUM, ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MIN)
"""``[sum, count, min, -max]``: storing ``-max`` lets one ``minimum`` update both extrema."""


@dataclass(frozen=True, slots=True)
class StateLayout:
    """A state's spec: its kind, each element's reduce op, and the kind's typed fields.

    Two ranks must hold the same layout for a key; :attr:`description` (compared across
    ranks through a digest) names everything that tells layouts apart.

    Args:
        kind: what the state holds.
        ops: one reduce op per element.
        per_rank: the quantities compared across ranks where the spread is asked for.
        reduce: a ``STAT``'s reduce type (any but ``SCALAR``); ``None`` for other kinds.

    Raises:
        ValueError: ``reduce`` or ``ops`` do not fit ``kind``.
    """

    kind: StateKind
    ops: tuple[ReduceOp, ...]
    per_rank: tuple[PerRank, ...] = ()
    reduce: StatReduce | None = None
    description: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self)
        ops = ",".join(op.value for op in self.ops)
        if self.kind is StateKind.STAT:
            text = f"stat(reduce={self.reduce.value}, buckets={self.n_buckets})"
        elif self.kind is StateKind.CUSTOM:
            text = f"custom[{ops}]"
        else:
            text = self.kind.value
        object.__setattr__(self, "description", text)

    @property
    def n_buckets(self) -> int:
        """A ``STAT``'s number of bucket counts (0 without bucket bounds)."""
        return len(self.ops) - len(STAT_OPS) if self.kind is StateKind.STAT else 0

    def identity(self) -> torch.Tensor:
        """The state of a rank that recorded nothing for this key."""
        return torch.tensor([_IDENTITY[op] for op in self.ops], dtype=torch.float64)


State = tuple[StateLayout, torch.Tensor]
"""A state as producers hand it to the reduction: its layout and its 1-D float64 values."""

Reduced = Mapping[str, tuple[StateLayout, np.ndarray]]
"""Reduced states as the reduction hands them back: ``key -> (layout, float64 array)``."""


def _check(layout: StateLayout) -> None:
    kind, ops, reduce = layout.kind, layout.ops, layout.reduce
    if not isinstance(kind, StateKind) or not all(isinstance(op, ReduceOp) for op in ops):
        raise ValueError(f"state layout needs a StateKind and ReduceOps, got {layout!r}")
    if kind is StateKind.STAT:
        if not isinstance(reduce, StatReduce) or reduce is StatReduce.SCALAR:
            raise ValueError(f"a stat's layout needs a stat reduce type, got {reduce!r}")
        n_buckets = len(ops) - len(STAT_OPS)
        if n_buckets < 0 or ops != STAT_OPS + (ReduceOp.SUM,) * n_buckets:
            raise ValueError(f"a stat's ops are {STAT_OPS} plus one sum per bucket, got {ops}")
        return
    if reduce is not None:
        raise ValueError(f"only a stat's layout has a reduce type; {kind} got {reduce}")
    expected = {StateKind.SCALAR: STAT_OPS, StateKind.DENOMINATOR: (ReduceOp.SUM,)}.get(kind)
    if expected is not None and ops != expected:
        raise ValueError(f"a {kind.value} state's ops are {expected}, got {ops}")


MEAN = (PerRank("", 0, 1, present=1),)  # a rank's value in the per-rank spread: sum / count
SCALAR_LAYOUT = StateLayout(StateKind.SCALAR, STAT_OPS, MEAN)
DENOMINATOR_LAYOUT = StateLayout(StateKind.DENOMINATOR, (ReduceOp.SUM,), (PerRank("", 0),))


@cache
def stat_layout(reduce: StatReduce, n_buckets: int) -> StateLayout:
    """The layout of a masked stat with ``n_buckets`` bucket counts (0 for none)."""
    return StateLayout(StateKind.STAT, STAT_OPS + (ReduceOp.SUM,) * n_buckets, MEAN, reduce)
