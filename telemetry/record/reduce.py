"""Coalesced data-parallel reduction of accumulator states: all-reduces, one per op.

Every producer of metrics (trackers, MoE balance, train_perf, Twinkle metrics) has its
states reduced here, through :func:`telemetry.record.export.reduce_sources`, as
``key -> (StateLayout, 1-D float64 tensor)``
(:mod:`telemetry.record.layout`). Each element of a state has its own reduce op
(``sum``/``min``/``max``), so a masked statistic ``[sum, count, min, -max, *buckets]`` is
one state.

Collectives per call, whatever the number of keys:

* world size 1 or ``group=None`` (rank-local, as in AReaL): none;
* ranks agree on the key set (the usual case): the 40-byte agreement check
  (:mod:`telemetry.record.keyset`, which also carries one yes/no vote:
  :func:`reduce_and_vote`), one SUM all-reduce of every summed element and one
  MIN all-reduce of every minimum and negated maximum (sent as order-preserving int64,
  :mod:`telemetry.record.ordered`, so NaN propagates); one more small MIN all-reduce when
  a tracked straggler quantity spans more ranks than the view's slots
  (:mod:`telemetry.record.stragglers`): 3 or 4;
* key sets differ: the same, over a cached union of keys the ranks agreed on before, or,
  when a rank's key specs changed, after an exchange of layouts (2 collectives inside
  ``torch.distributed``); missing states are filled with the reduce identity. A key whose
  layout differs between ranks raises :class:`KeyMismatchError` on every rank, naming it.

Each rank receives the reduced vector (``n`` float64 for ``n`` elements), not every rank's
payload, so the bytes per rank do not grow with the world size, and an all-reduce hands
every rank the same bits. On NCCL the payload, the reduction and the straggler values stay
on the group's device; the host reads the 40-byte check and then the reduced vector in one
copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record import keyset
from telemetry.record.comm import Comm, collectives_issued
from telemetry.record.layout import ReduceOp, State, StateLayout
from telemetry.record.ordered import decode, encode
from telemetry.record.source_key import Key, key_name
from telemetry.record.stragglers import RankSpread, Stragglers, quantities

__all__ = [
    "RankSpread",
    "collectives_issued",
    "reduce_and_vote",
    "reduce_states",
    "reduce_with_spread",
]

ReducedStates = dict[Key, tuple[StateLayout, np.ndarray]]
Spreads = dict[Key, dict[str, RankSpread]]
_PLANS = 16  # element plans cached, by digest of the key specs


@dataclass(slots=True)
class _Plan:
    """Where each key starts in the flat vector, and which elements each op reduces."""

    offsets: dict[Key, int]
    n: int
    index: dict[ReduceOp, torch.Tensor]
    on_device: dict[torch.device, dict[ReduceOp, torch.Tensor]] = field(default_factory=dict)

    def indices(self, device: torch.device) -> dict[ReduceOp, torch.Tensor]:
        if device not in self.on_device:
            self.on_device[device] = {op: idx.to(device) for op, idx in self.index.items()}
        return self.on_device[device]


_lock = threading.Lock()
_plans: dict[int, _Plan] = {}


def _plan(keys: keyset.KeySet) -> _Plan:
    with _lock:
        plan = _plans.pop(keys.digest, None)
    if plan is None:
        offsets, ops = {}, []
        for key in keys.keys:
            offsets[key] = len(ops)
            ops.extend(op.value for op in keys.layouts[key].ops)
        codes = np.array(ops)
        index = {op: torch.from_numpy(np.flatnonzero(codes == op.value)) for op in ReduceOp}
        plan = _Plan(offsets, len(ops), index)
    with _lock:
        _plans[keys.digest] = plan  # most recent last
        while len(_plans) > _PLANS:
            del _plans[next(iter(_plans))]
    return plan


def reduce_states(
    states: Mapping[Key, State], group: dist.ProcessGroup | None = None
) -> ReducedStates:
    """Reduce every state across ``group``; return ``key -> (layout, float64 array)`` on
    the host (:func:`reduce_with_spread` without the straggler view)."""
    return reduce_with_spread(states, group)[0]


def reduce_with_spread(
    states: Mapping[Key, State],
    group: dist.ProcessGroup | None = None,
    spread: Callable[[Key], bool] = lambda key: False,
    *,
    series: Callable[[Key], bool] = lambda key: False,
) -> tuple[ReducedStates, Spreads]:
    """Reduce every state across ``group``, with the straggler view of chosen keys
    (:func:`reduce_and_vote` without a vote)."""
    reduced, spreads, _ = reduce_and_vote(states, group, spread, series=series)
    return reduced, spreads


def reduce_and_vote(
    states: Mapping[Key, State],
    group: dist.ProcessGroup | None = None,
    spread: Callable[[Key], bool] = lambda key: False,
    *,
    series: Callable[[Key], bool] = lambda key: False,
    vote: bool = False,
) -> tuple[ReducedStates, Spreads, bool]:
    """Reduce every state across ``group``, with the straggler view of chosen keys, and
    learn whether any rank voted yes (carried in the key-set check, no collective more).

    Keys recorded on only some ranks are reduced over the ranks that have them (the
    others contribute the identity). ``group=None`` is rank-local, as AReaL's
    ``export(reduce_group=None)``: no collective, whatever process group exists (pass
    ``dist.group.WORLD`` for the whole world). For each key where ``spread(key)`` holds,
    the quantities its layout names in ``per_rank`` are compared across ranks
    (:mod:`telemetry.record.stragglers`); where ``series(key)`` also holds, every rank's
    value is gathered to the group's first rank.

    Returns:
        ``key -> (layout, float64 array)``, ``key -> {suffix: RankSpread}``, and whether
        any rank of ``group`` passed ``vote=True`` (the same on every rank; this rank's
        own ``vote`` when rank-local).

    Raises:
        KeyMismatchError: a key has different layouts on different ranks (on every rank).
    """
    for key, (layout, tensor) in states.items():
        if tensor.numel() != len(layout.ops):
            raise KeyMismatchError(
                f"{key_name(key)}: state has {tensor.numel()} elements, "
                f"layout {layout.description} has {len(layout.ops)}"
            )
    comm = Comm(group)
    keys, voted = keyset.agree(comm, {k: layout for k, (layout, _) in states.items()}, vote)
    if not keys.keys:
        return {}, {}, voted
    plan = _plan(keys)
    flat = _flat_payload(keys, states, comm.device)
    qs = quantities(keys.keys, keys.layouts, plan.offsets, plan.n, spread, series)
    view = Stragglers(comm, qs, flat) if qs else None
    index = plan.indices(comm.device)
    sums = [flat[index[ReduceOp.SUM]]]
    if not keys.held_by_all:
        held = [1.0 if key in states else 0.0 for key in keys.keys]
        sums.append(torch.tensor(held, dtype=torch.float64).to(comm.device))
    mins = [encode(flat[index[ReduceOp.MIN]]), encode(-flat[index[ReduceOp.MAX]])]
    if view is not None:
        sums.append(view.sum_part())
        mins.append(view.min_part())
    summed = comm.all_reduce(torch.cat(sums), dist.ReduceOp.SUM)
    least = decode(comm.all_reduce(torch.cat(mins), dist.ReduceOp.MIN))
    n_sum, n_min = (index[op].numel() for op in (ReduceOp.SUM, ReduceOp.MIN))
    reduced = torch.empty_like(flat)
    reduced[index[ReduceOp.SUM]] = summed[:n_sum]
    reduced[index[ReduceOp.MIN]] = least[:n_min]
    reduced[index[ReduceOp.MAX]] = -least[n_min : n_min + index[ReduceOp.MAX].numel()]
    tails = [summed[n_sum:], least[n_min + index[ReduceOp.MAX].numel() :]]
    extra = [view.values] if view is not None else []
    host = torch.cat([reduced, *tails, *extra]).cpu().numpy()  # the one device-to-host copy
    values, rest = host[: plan.n], host[plan.n :]
    counts, rest = _take(rest, 0 if keys.held_by_all else len(keys.keys))
    kept = set(keys.keys) if keys.held_by_all else _held(keys.keys, counts)
    out = {
        key: (keys.layouts[key], values[start : start + len(keys.layouts[key].ops)].copy())
        for key, start in plan.offsets.items()
        if key in kept
    }
    if view is None:
        return out, {}, voted
    present, rest = _take(rest, len(qs))
    minima, local = rest[: len(rest) - len(qs)], rest[len(rest) - len(qs) :]
    return out, view.finish(present, minima, local, kept.__contains__), voted


def _take(array: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    return array[:n], array[n:]


def _held(keys: tuple[Key, ...], counts: np.ndarray) -> set[Key]:
    return {key for key, count in zip(keys, counts) if count > 0}


def _flat_payload(keys: keyset.KeySet, states: Mapping[Key, State], device: torch.device):
    """One float64 vector of every state (the identity where this rank has none), with one
    copy per source device."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    order: list[tuple[torch.device, int]] = []
    for key in keys.keys:
        state = states.get(key)
        tensor = state[1] if state is not None else keys.layouts[key].identity()
        if tensor.dim() != 1:
            tensor = tensor.reshape(-1)
        bucket = by_device.setdefault(tensor.device, [])
        order.append((tensor.device, len(bucket)))
        bucket.append(tensor)
    # torch.cat promotes every dtype to float64 (the states' own); each device moves once
    if len(by_device) == 1:
        ((_, tensors),) = by_device.items()
        return torch.cat(tensors).to(device, torch.float64)
    moved = {
        src: torch.cat(ts).to(device, torch.float64).split([t.numel() for t in ts])
        for src, ts in by_device.items()
    }
    return torch.cat([moved[src][i] for src, i in order])
