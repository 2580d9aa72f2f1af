"""Declared states: every producer's custom states said once, with their reductions.

As torchmetrics' ``add_state``, a producer declares each state by name with how its
elements combine across calls and ranks (``sum``/``min``/``max``, one op for all or one
per element), its size, and the per-rank quantities of the straggler view; the
:class:`~telemetry.record.layout.StateLayout` the DP reduction compares across ranks follows
from the declaration. MoE balance, train_perf and the Twinkle metrics declare their states
here; a tracker's keys take the layouts of their kind (stat, scalar, denominator) from
:mod:`telemetry.record.layout` when first recorded.

    states = DeclaredStates("moe_balance/layer_")
    states.add_state("3", ReduceOp.SUM, size=num_experts)
    collected = states.states({"3": counts})     # {"moe_balance/layer_3": (layout, counts)}
    reduced_counts = states.values(reduced)["3"]  # after the reduction
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from telemetry.record.layout import PerRank, Reduced, ReduceOp, State, StateKind, StateLayout

__all__ = ["DeclaredStates"]


@dataclass(frozen=True, slots=True)
class _Declaration:
    """One declared state: its reduce op (or one per element), size and per-rank quantities.

    ``size`` is ``None`` where each collected value sets it (a single op only).
    """

    reduce: ReduceOp | tuple[ReduceOp, ...]
    size: int | None
    per_rank: tuple[PerRank, ...]

    def layout(self, n: int) -> StateLayout:
        """The layout of this state holding ``n`` elements."""
        ops = self.reduce if isinstance(self.reduce, tuple) else (self.reduce,) * n
        return _layout(ops, self.per_rank)


@cache
def _layout(ops: tuple[ReduceOp, ...], per_rank: tuple[PerRank, ...]) -> StateLayout:
    return StateLayout(StateKind.CUSTOM, ops, per_rank)


def _op(owner: str, value: object) -> ReduceOp:
    try:
        return ReduceOp(value)
    except ValueError:
        allowed = ", ".join(op.value for op in ReduceOp)
        raise ValueError(f"{owner}: reduce op must be one of {allowed}; got {value!r}") from None


class DeclaredStates:
    """A producer's states by name, each declared once (:meth:`add_state`).

    Args:
        prefix: the producer's key prefix in an export (``moe_balance/layer_``,
            ``twinkle/<name>/``); the states' keys are ``prefix + name``.
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._declared: dict[str, _Declaration] = {}

    def add_state(
        self,
        name: str,
        reduce: ReduceOp | Sequence[ReduceOp],
        *,
        size: int | None = 1,
        per_rank: Sequence[PerRank] = (),
    ) -> _Declaration:
        """Declare state ``name``.

        Args:
            name: unique among this producer's states.
            reduce: how the elements combine across calls and ranks: one op for all, or a
                sequence of one op per element (which gives the size).
            size: the number of elements of a single-op state; ``None`` where each
                collected value sets it.
            per_rank: the quantities the straggler view compares across ranks.

        Raises:
            ValueError: ``name`` is declared already, an op is not ``sum``/``min``/``max``,
                or ``size`` is not a positive int (or ``None``) or disagrees with ``reduce``.
        """
        owner = self.prefix + name
        if name in self._declared:
            raise ValueError(f"{owner}: state declared twice")
        if isinstance(reduce, (str, ReduceOp)):
            op: ReduceOp | tuple[ReduceOp, ...] = _op(owner, reduce)
        else:
            op = tuple(_op(owner, each) for each in reduce)
            if size not in (1, len(op)):
                raise ValueError(f"{owner}: {len(op)} reduce ops but size {size}")
            size = len(op)
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"{owner}: size must be a positive int or None, got {size!r}")
        declared = self._declared[name] = _Declaration(op, size, tuple(per_rank))
        return declared

    def __contains__(self, name: object) -> bool:
        return name in self._declared

    def __getitem__(self, name: str) -> _Declaration:
        return self._declared[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def states(self, values: Mapping[str, torch.Tensor]) -> dict[str, State]:
        """The export's states of ``values`` (1-D float64, by declared name):
        ``prefix + name -> (layout, values)``.

        Raises:
            KeyError: a name was not declared.
        """
        out: dict[str, State] = {}
        for name, tensor in values.items():
            out[self.prefix + name] = (self._declared[name].layout(tensor.numel()), tensor)
        return out

    def values(self, reduced: Reduced) -> dict[str, np.ndarray]:
        """This producer's reduced values by state name: the keys under the prefix, also
        those declared on other ranks only."""
        head, n = self.prefix, len(self.prefix)
        return {key[n:]: values for key, (_, values) in reduced.items() if key.startswith(head)}
