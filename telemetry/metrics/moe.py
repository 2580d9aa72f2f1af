"""MoE expert load balance (``moe_balance`` scope).

:meth:`MoEBalance.record` counts router assignments per layer and expert on the
indices' device with ``scatter_add_`` (fixed output size, so no host sync; CUDA
``bincount`` would read the max back). Top-k repeats count once each; indices outside
``[0, num_experts)`` (e.g. ``-1`` or ``num_experts`` for a capacity drop, as routers
report them) are dropped. An explicit ``record`` call counts wherever it is made: the
caller decides which forwards are recorded. The automatic router hooks of
:mod:`telemetry.metrics.moe_hooks` count only forwards inside
:meth:`MoEBalance.training` and never the forward re-run by activation checkpointing
during backward (see :attr:`MoEBalance.counting`).

At export (a :class:`~telemetry.record.source.StateSource` in ``export_all``'s single
reduction; one declared ``sum`` state per layer, :mod:`telemetry.record.declared`) the
counts are summed over micro-batches and ranks, then normalised per layer with E
experts and counts ``c_e``:

* ``moe_balance/tokens`` (layer, expert): ``c_e``;
* ``moe_balance/load_percent`` (layer, expert): ``100 * c_e / sum(c)``;
* ``moe_balance/max_over_ideal`` (layer): ``max(c) / (sum(c) / E)``, 1 when balanced;

all 0 for a layer without assignments. Flat keys are
``moe_balance/layer_<i>/expert_<e>/{tokens,load_percent}`` and
``moe_balance/layer_<i>/max_over_ideal``. Ranks holding different layers (pipeline
stages) reduce correctly: each layer is its own key.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import Gauge, Point
from telemetry.record.declared import DeclaredStates
from telemetry.record.export import register_source, unregister_source
from telemetry.record.layout import Reduced, ReduceOp
from telemetry.record.source import Collected

PREFIX = "moe_balance/layer_"


def _positive_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidValueError(f"moe_balance: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


class MoEBalance:
    """Per-layer, per-expert routing counts, reduced at export.

    :meth:`record` always counts; :meth:`training` and :attr:`counting` only gate the
    router hooks (:mod:`telemetry.metrics.moe_hooks`).

    Args:
        register: join ``stats_tracker.export_all`` (undo with :meth:`close`).
    """

    source_id = "moe_balance"

    def __init__(self, register: bool = True) -> None:
        # layer -> int64 counts of length num_experts + 1 (the last bin takes drops)
        self._counts: dict[int, torch.Tensor] = {}
        self._states = DeclaredStates(PREFIX)  # one per declared layer, by layer id
        self._training = 0
        if register:
            register_source(self)

    @contextmanager
    def training(self) -> Iterator[None]:
        """Let the router hooks count the forwards run inside this block (the training
        forward of train_batch); explicit :meth:`record` calls count with or without it."""
        self._training += 1
        try:
            yield
        finally:
            self._training -= 1

    @property
    def counting(self) -> bool:
        """Whether a hooked router forward now counts: inside :meth:`training`, outside
        backward. Explicit :meth:`record` calls do not consult it."""
        # a forward during backward is activation-checkpoint recomputation
        return self._training > 0 and torch._C._current_graph_task_id() == -1

    def add_layer(self, layer_id: int, num_experts: int) -> None:
        """Declare a layer so it is exported (with 0s) even if nothing routes to it.

        Raises:
            InvalidValueError: bad ids, or ``num_experts`` differs from an earlier call.
        """
        layer_id = _positive_int("layer_id", layer_id, 0)
        num_experts = _positive_int(f"layer_{layer_id} num_experts", num_experts, 1)
        name = str(layer_id)
        if name not in self._states:
            self._states.add_state(name, ReduceOp.SUM, size=num_experts)
        elif (known := self._states[name].size) != num_experts:
            raise InvalidValueError(
                f"{PREFIX}{layer_id}: recorded with {known} experts, now {num_experts}"
            )

    def record(self, layer_id: int, expert_indices: torch.Tensor, num_experts: int) -> None:
        """Count one forward of one layer's router, wherever it is called.

        Unlike the router hooks, an explicit call is not limited to
        :meth:`training` and also counts during activation-checkpoint recomputation:
        call it only for the forwards that should count.

        Args:
            layer_id: global layer index from 0, unique across pipeline stages.
            expert_indices: integer tensor of chosen experts, any shape (e.g. ``[tokens,
                top_k]``); values outside ``[0, num_experts)`` are dropped assignments.
            num_experts: routed experts of the layer (shared experts excluded).

        Raises:
            InvalidValueError: non-integer indices, bad ids, or a changed expert count.
        """
        self.add_layer(layer_id, num_experts)
        if not isinstance(expert_indices, torch.Tensor) or (
            expert_indices.dtype.is_floating_point
            or expert_indices.is_complex()
            or expert_indices.dtype == torch.bool
        ):
            raise InvalidValueError(
                f"{PREFIX}{layer_id}: expert indices must be an integer tensor, "
                f"got {getattr(expert_indices, 'dtype', type(expert_indices).__name__)}"
            )
        counts = self._counts.get(layer_id)
        if counts is None:
            counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=expert_indices.device)
            self._counts[layer_id] = counts
        index = expert_indices.detach().reshape(-1).to(device=counts.device, dtype=torch.int64)
        valid = (index >= 0) & (index < num_experts)
        index = torch.where(valid, index, num_experts)
        counts.scatter_add_(0, index, torch.ones_like(index))

    # -- StateSource -------------------------------------------------------------------

    def collect(self, key: str | None = None, reset: bool = True) -> Collected:
        """One state per declared layer, its expert counts (summed over ranks); ``reset``
        starts a new window. ``key`` is a tracker's filter: ignored."""
        values: dict[str, torch.Tensor] = {}
        for name in self._states:
            experts, counts = self._states[name].size, self._counts.get(int(name))
            values[name] = (
                torch.zeros(experts, dtype=torch.float64)
                if counts is None
                else counts[:experts].to(torch.float64)
            )
        if reset:
            self.reset()
        return Collected(self._states.states(values))

    def build_points(self, reduced: Reduced) -> list[Point]:
        """Tokens, load share and max-over-ideal per layer, ordered by layer id."""
        layers = sorted(
            (int(name), counts) for name, counts in self._states.values(reduced).items()
        )
        points: list[Point] = []
        for layer, counts in layers:
            total = float(counts.sum())
            for expert, count in enumerate(counts.tolist()):
                attributes = (("layer", layer), ("expert", expert))
                share = 100.0 * count / total if total > 0 else 0.0
                points.append(
                    Gauge("moe_balance/tokens", count, unit="{token}", attributes=attributes)
                )
                points.append(
                    Gauge("moe_balance/load_percent", share, unit="%", attributes=attributes)
                )
            ratio = float(counts.max()) / (total / len(counts)) if total > 0 else 0.0
            points.append(
                Gauge("moe_balance/max_over_ideal", ratio, unit="1", attributes=(("layer", layer),))
            )
        return points

    def reset(self) -> None:
        """Start a new window (declared layers stay declared)."""
        self._counts = {}

    def close(self) -> None:
        """Stop joining ``export_all`` (idempotent)."""
        unregister_source(self)
