"""The previous DP reduction (rltel before issue 25), kept for ``bench/reduce_bench.py`` only.

Every rank all-gathers a fixed-size header (digest of its key specs, payload length), then
every rank's whole payload, and reduces the ``[world, n]`` matrix itself: 2 collectives,
but ``world * n * 8`` bytes received per rank. The straggler view reads the same matrix
(no top-k, no chronic stragglers). Same signature as
:func:`telemetry.record.reduce.reduce_with_spread`, so the bench can swap it in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record.layout import ReduceOp, State, StateLayout
from telemetry.record.stragglers import RankSpread

__all__ = ["reduce_with_spread"]


def _world(group) -> int:
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def _digest(specs: list[tuple[str, str]]) -> int:
    text = "\n".join(f"{key}\t{desc}" for key, desc in specs).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def _flat(keys: list[str], states: Mapping[str, State]) -> torch.Tensor:
    if not keys:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([states[key][1].reshape(-1).to(torch.float64) for key in keys])


def _check_layouts(all_layouts: list[dict[str, StateLayout]]) -> dict[str, StateLayout]:
    union: dict[str, StateLayout] = {}
    for layouts in all_layouts:
        for key, layout in layouts.items():
            if union.setdefault(key, layout).description != layout.description:
                raise KeyMismatchError(f"{key!r}: different layouts on different ranks")
    return union


def _reduce_matrix(matrix: torch.Tensor, ops: list[ReduceOp]) -> torch.Tensor:
    out = torch.empty(matrix.shape[1], dtype=torch.float64)
    codes = np.array([op.value for op in ops])
    for op, fn in (
        (ReduceOp.SUM, lambda m: m.sum(0)),
        (ReduceOp.MIN, lambda m: m.amin(0)),
        (ReduceOp.MAX, lambda m: m.amax(0)),
    ):
        index = torch.from_numpy(np.flatnonzero(codes == op.value))
        if index.numel():
            out[index] = fn(matrix.index_select(1, index))
    return out


def _gather(tensor: torch.Tensor, world: int, group) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor, group=group)
    return torch.stack(parts)


def reduce_with_spread(
    states: Mapping[str, State],
    group: dist.ProcessGroup | None = None,
    spread: Callable[[str], bool] = lambda key: False,
    *,
    series: Callable[[str], bool] = lambda key: False,
):
    """The gather-based reduction (gloo/CPU only, as the bench runs it)."""
    keys = sorted(states)
    world = _world(group)
    layouts = {key: states[key][0] for key in keys}
    local = _flat(keys, states)
    if world > 1:
        specs = [(key, layout.description) for key, layout in layouts.items()]
        headers = _gather(torch.tensor([_digest(specs), local.numel()]), world, group)
        if not bool((headers == headers[0]).all()):
            all_layouts: list = [None] * world
            dist.all_gather_object(all_layouts, layouts, group=group)
            layouts = {**_check_layouts(all_layouts), **layouts}
            keys = sorted(layouts)
            filled = {k: states.get(k, (layouts[k], layouts[k].identity())) for k in keys}
            local = _flat(keys, filled)
    if local.numel() == 0:
        return {}, {}
    matrix = _gather(local, world, group) if world > 1 else local[None]
    ops = [op for key in keys for op in layouts[key].ops]
    reduced = _reduce_matrix(matrix, ops).numpy()
    out, spreads, offset = {}, {}, 0
    for key in keys:
        n = len(layouts[key].ops)
        out[key] = (layouts[key], reduced[offset : offset + n].copy())
        if layouts[key].per_rank and spread(key):
            spreads[key] = _spreads(
                layouts[key], matrix[:, offset : offset + n].numpy(), series(key)
            )
        offset += n
    return out, {key: by for key, by in spreads.items() if by}


def _spreads(layout: StateLayout, columns: np.ndarray, series: bool) -> dict[str, RankSpread]:
    out = {}
    for quantity in layout.per_rank:
        values = columns[:, quantity.numerator]
        if quantity.denominator is not None:
            counts = columns[:, quantity.denominator]
            values = values / np.where(counts > 0, counts, np.nan)
        if quantity.present is not None:
            values = np.where(columns[:, quantity.present] > 0, values, np.nan)
        if np.isnan(values).all():
            continue
        slowest = int(np.nanargmax(values))
        everyone = tuple(values.tolist()) if series else ()
        out[quantity.suffix] = RankSpread(
            float(np.nanmin(values)), float(values[slowest]), slowest, everyone
        )
    return out
