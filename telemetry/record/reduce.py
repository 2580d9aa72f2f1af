"""Coalesced data-parallel reduction of accumulator states.

Every producer of metrics (trackers, MoE balance, train_perf, Twinkle metrics) hands
its states to :func:`reduce_states` as ``key -> (StateLayout, 1-D float64 tensor)``
(:mod:`telemetry.record.layout`). Each element of a state has its own reduce op
(``sum``/``min``/``max``), so a masked statistic ``[sum, count, min, -max, *buckets]`` is
one state.

Collectives per call, whatever the number of keys:

* world size 1 or ``group=None`` (rank-local, as in AReaL): none;
* ranks agree on the key set (the usual case): 2 (a fixed-size header gather that
  compares a digest of the key specs, then one gather of the flat payload);
* ranks disagree: 4 (the header, an object gather of the specs — two collectives
  inside ``torch.distributed`` — then the payload over the union of keys, missing
  states filled with the reduce identity). A key whose layout differs between ranks
  raises :class:`KeyMismatchError` on every rank, naming the key.

The payload is gathered rather than all-reduced so that sum, min and max travel in
one collective; every rank then reduces the same ``[world, n]`` matrix in the same
order and obtains bit-identical results.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record.layout import ReduceOp, State, StateLayout

__all__ = [
    "RankSpread",
    "collectives_issued",
    "reduce_states",
    "reduce_states_with_layouts",
    "reduce_with_spread",
]


@dataclass(frozen=True, slots=True)
class RankSpread:
    """One per-rank quantity across the ranks that have it: its extremes, who is slowest,
    and every rank's value (NaN for a rank without it)."""

    low: float
    high: float
    slowest_rank: int
    values: tuple[float, ...] = ()


_collectives_issued = 0


def collectives_issued() -> int:
    """How many collectives this process has issued for reductions (for benchmarks)."""
    return _collectives_issued


def _count_collectives(n: int) -> None:
    global _collectives_issued
    _collectives_issued += n


def _world(group) -> int:
    """The ranks a reduction spans: 1 (rank-local, no collective) for ``group=None``."""
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def _collective_device(group) -> torch.device:
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _digest(specs: list[tuple[str, str]]) -> int:
    text = "\n".join(f"{key}\t{desc}" for key, desc in specs).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def _flat_payload(keys: list[str], states: Mapping[str, State], device: torch.device):
    """One float64 vector of every state, with one copy per source device."""
    if not keys:
        return torch.zeros(0, dtype=torch.float64, device=device)
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    order: list[tuple[torch.device, int]] = []
    for key in keys:
        tensor = states[key][1].reshape(-1).to(torch.float64)
        bucket = by_device.setdefault(tensor.device, [])
        order.append((tensor.device, len(bucket)))
        bucket.append(tensor)
    if len(by_device) == 1:
        ((_, tensors),) = by_device.items()
        return torch.cat(tensors).to(device)
    # Several devices: concatenate per device, move each once, then restore key order.
    moved = {
        src: torch.cat(ts).to(device).split([t.numel() for t in ts])
        for src, ts in by_device.items()
    }
    return torch.cat([moved[src][i] for src, i in order])


def _check_layouts(all_layouts: list[dict[str, StateLayout]]) -> dict[str, StateLayout]:
    """The union of every rank's layouts; a key with different layouts raises."""
    union: dict[str, StateLayout] = {}
    conflicts: dict[str, set[str]] = {}
    for layouts in all_layouts:
        for key, layout in layouts.items():
            seen = union.setdefault(key, layout)
            if seen.description != layout.description:
                conflicts.setdefault(key, {seen.description}).add(layout.description)
    if conflicts:
        details = "; ".join(
            f"{key!r}: {' vs '.join(sorted(descs))}" for key, descs in sorted(conflicts.items())
        )
        raise KeyMismatchError(f"ranks recorded keys with different layouts: {details}")
    return union


def _reduce_matrix(matrix: torch.Tensor, ops: list[ReduceOp]) -> torch.Tensor:
    out = torch.empty(matrix.shape[1], dtype=torch.float64, device=matrix.device)
    op_codes = np.array([op.value for op in ops])
    for op, fn in (
        (ReduceOp.SUM, lambda m: m.sum(0)),
        (ReduceOp.MIN, lambda m: m.amin(0)),
        (ReduceOp.MAX, lambda m: m.amax(0)),
    ):
        index = torch.from_numpy(np.flatnonzero(op_codes == op.value)).to(matrix.device)
        if index.numel():
            out[index] = fn(matrix.index_select(1, index))
    return out


def _gather(tensor: torch.Tensor, world: int, group) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor, group=group)
    _count_collectives(1)
    return torch.stack(parts)


def reduce_states(
    states: Mapping[str, State], group: dist.ProcessGroup | None = None
) -> dict[str, np.ndarray]:
    """Reduce every state across ``group``; return ``key -> float64 array`` on the host.

    See :func:`reduce_states_with_layouts`, which also returns each key's layout.
    """
    return {key: values for key, (_, values) in reduce_states_with_layouts(states, group).items()}


def reduce_states_with_layouts(
    states: Mapping[str, State], group: dist.ProcessGroup | None = None
) -> dict[str, tuple[StateLayout, np.ndarray]]:
    """Reduce every state across ``group``; return ``key -> (layout, float64 array)``.

    See :func:`reduce_with_spread`.
    """
    return reduce_with_spread(states, group)[0]


Reduced = dict[str, tuple[StateLayout, np.ndarray]]
Spreads = dict[str, dict[str, RankSpread]]


def reduce_with_spread(
    states: Mapping[str, State],
    group: dist.ProcessGroup | None = None,
    spread: Callable[[str], bool] = lambda key: False,
) -> tuple[Reduced, Spreads]:
    """Reduce every state across ``group``, with the per-rank spread of chosen keys.

    Keys recorded on only some ranks are reduced over the ranks that have them (the
    others contribute the identity). ``group=None`` is rank-local, as AReaL's
    ``export(reduce_group=None)``: no collective, whatever process group exists (pass
    ``dist.group.WORLD`` for the whole world). For each key
    where ``spread(key)`` holds, the quantities its layout names in ``per_rank`` are also
    compared across ranks, from the same gathered payload (no extra collective).

    Returns:
        ``key -> (layout, float64 array)`` and ``key -> {suffix: RankSpread}``.

    Raises:
        KeyMismatchError: a key has different layouts on different ranks (on every rank).
    """
    for key, (layout, tensor) in states.items():
        if tensor.numel() != len(layout.ops):
            raise KeyMismatchError(
                f"{key!r}: state has {tensor.numel()} elements, layout {layout.description} "
                f"has {len(layout.ops)}"
            )
    keys = sorted(states)
    world = _world(group)
    if world == 1:
        payload = _flat_payload(keys, states, torch.device("cpu")).numpy()
        layouts = {k: states[k][0] for k in keys}
        return _split(keys, layouts, payload), _spreads(keys, layouts, payload[None], spread)

    device = _collective_device(group)
    layouts = {key: states[key][0] for key in keys}
    specs = [(key, layout.description) for key, layout in layouts.items()]
    local = _flat_payload(keys, states, device)
    header = torch.tensor([_digest(specs), local.numel()], dtype=torch.int64)
    headers = _gather(header.to(device), world, group).cpu()
    if bool((headers == headers[0]).all()):
        union_keys = keys
    else:
        # The layouts themselves travel (frozen data): a key this rank lacks gets the
        # layout, per-rank quantities included, that the ranks holding it recorded.
        all_layouts: list[dict[str, StateLayout] | None] = [None] * world
        dist.all_gather_object(all_layouts, layouts, group=group)
        _count_collectives(2)
        layouts = {**_check_layouts([s for s in all_layouts if s is not None]), **layouts}
        union_keys = sorted(layouts)
        filled = {
            key: states.get(key, (layouts[key], layouts[key].identity())) for key in union_keys
        }
        local = _flat_payload(union_keys, filled, device)
    if local.numel() == 0:
        return {}, {}
    matrix = _gather(local, world, group)
    ops = [op for key in union_keys for op in layouts[key].ops]
    reduced = _reduce_matrix(matrix, ops).cpu().numpy()
    spreads = _spreads(union_keys, layouts, matrix, spread)
    return _split(union_keys, layouts, reduced), spreads


def _spreads(
    keys: list[str],
    layouts: Mapping[str, StateLayout],
    matrix: torch.Tensor | np.ndarray,
    spread: Callable[[str], bool],
) -> Spreads:
    """The per-rank spread of the chosen keys from the ``[world, n]`` gathered payload."""
    columns: dict[str, int] = {}
    offset = 0
    for key in keys:
        if layouts[key].per_rank and spread(key):
            columns[key] = offset
        offset += len(layouts[key].ops)
    if not columns:
        return {}
    wanted = sorted({columns[k] + i for k in columns for i in range(len(layouts[k].ops))})
    if isinstance(matrix, torch.Tensor):
        matrix = matrix[:, wanted].cpu().numpy()
    else:
        matrix = matrix[:, wanted]
    where = {column: i for i, column in enumerate(wanted)}
    out: Spreads = {}
    for key, start in columns.items():
        for quantity in layouts[key].per_rank:
            values = matrix[:, where[start + quantity.numerator]]
            if quantity.denominator is not None:
                counts = matrix[:, where[start + quantity.denominator]]
                values = values / np.where(counts > 0, counts, np.nan)
            if quantity.present is not None:
                values = np.where(matrix[:, where[start + quantity.present]] > 0, values, np.nan)
            if np.isnan(values).all():
                continue
            slowest = int(np.nanargmax(values))
            out.setdefault(key, {})[quantity.suffix] = RankSpread(
                float(np.nanmin(values)), float(values[slowest]), slowest, tuple(values.tolist())
            )
    return out


def _split(keys: list[str], layouts: Mapping[str, StateLayout], flat: np.ndarray):
    out: dict[str, tuple[StateLayout, np.ndarray]] = {}
    offset = 0
    for key in keys:
        n = len(layouts[key].ops)
        out[key] = (layouts[key], flat[offset : offset + n].copy())
        offset += n
    return out
