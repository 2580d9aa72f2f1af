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
  (:func:`agree`, below, which also carries one yes/no vote:
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

Agreeing on the keys of one reduction (:func:`agree`): an O(1) check, and a cache of agreed
unions. Every rank proposes a key set and sends ``[proposal, -proposal, own, -own, -vote]``
(digests of key specs, 63 bits, and a yes/no vote as 1/0) in one int64 MIN all-reduce of 40
bytes, whatever the world size. The minimum of ``-vote`` is -1 when any rank voted yes (the
export's "does a rank other than the first hold rollout samples": the samples are gathered
only then). The minimum of ``x`` equals minus the minimum of ``-x`` only when every rank sent
the same ``x``, so:

* every rank holds the same keys (own digests agree): reduce those;
* the proposals agree: every rank proposed the same cached union, which covers its own
  keys: reduce over it (a key no rank holds this time is dropped after the reduction);
* neither: the ranks exchange their layouts (``all_gather_object``, the only step whose
  bytes grow with the world size), agree on the union, and cache it.

A rank proposes the most recently agreed union (per group, at most :data:`CACHED_UNIONS`)
that holds each of its keys with the same layout, else its own set. The caches are equal on
every rank, since each agreed union is computed from the same exchanged data; a steady
state where some ranks always record keys that others do not exchanges layouts once, and
again only when a rank's key specs change. A cached union is only ever used after every
rank proposed its digest, so the cache can make an export slower, never wrong.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record.comm import Comm, collectives_issued
from telemetry.record.layout import ReduceOp, State, StateLayout
from telemetry.record.ordered import decode, encode
from telemetry.record.source import Key, key_name, spelling
from telemetry.record.stragglers import RankSpread, Stragglers, quantities

__all__ = [
    "CACHED_UNIONS",
    "RankSpread",
    "agree",
    "collectives_issued",
    "reduce_and_vote",
    "reduce_states",
    "reduce_with_spread",
]

ReducedStates = dict[Key, tuple[StateLayout, np.ndarray]]
Spreads = dict[Key, dict[str, RankSpread]]
_PLANS = 16  # element plans cached, by digest of the key specs

CACHED_UNIONS = 8
"""Agreed unions remembered per group, most recently used first."""
CACHED_GROUPS = 64
"""Groups with remembered unions, the least recently agreed forgotten first."""
_unions_lock = threading.Lock()
_unions: dict[int, list[_KeySet]] = {}


@dataclass(frozen=True, slots=True)
class _KeySet:
    """Sorted keys with their layouts and the digest of their specs.

    ``held_by_all`` says every rank of the reduction holds every key; when False some keys
    may be held by no rank this time (the reduction counts holders to drop them).
    """

    keys: tuple[Key, ...]
    layouts: Mapping[Key, StateLayout]
    digest: int
    held_by_all: bool

    @classmethod
    def of(cls, layouts: Mapping[Key, StateLayout], held_by_all: bool = True) -> _KeySet:
        keys = tuple(sorted(layouts))
        text = "\n".join(f"{spelling(key)}\t{layouts[key].description}" for key in keys)
        digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        return cls(keys, {key: layouts[key] for key in keys}, digest >> 1, held_by_all)

    def covers(self, layouts: Mapping[Key, StateLayout]) -> bool:
        """Whether every key of ``layouts`` is here with the same layout."""
        mine = self.layouts
        return all(
            key in mine and mine[key].description == layout.description
            for key, layout in layouts.items()
        )


def agree(comm: Comm, layouts: Mapping[Key, StateLayout], vote: bool) -> tuple[_KeySet, bool]:
    """The key set every rank of ``comm`` reduces over (see the module docstring), and
    whether any rank passed ``vote=True`` (the same answer on every rank).

    Raises:
        KeyMismatchError: a key has different layouts on different ranks (on every rank).
    """
    own = _KeySet.of(layouts)
    if comm.world == 1:
        return own, vote
    with _unions_lock:
        cache = list(_unions.get(comm.key, ()))
    proposal = next((union for union in cache if union.covers(layouts)), own)
    header = torch.tensor(
        [proposal.digest, -proposal.digest, own.digest, -own.digest, -int(vote)],
        dtype=torch.int64,
    )
    low = comm.all_reduce(header.to(comm.device), dist.ReduceOp.MIN).tolist()
    voted = low[4] < 0
    if low[2] == -low[3]:
        return own, voted
    if low[0] == -low[1]:
        _remember(comm.key, proposal)
        return _KeySet(proposal.keys, proposal.layouts, proposal.digest, held_by_all=False), voted
    union = _KeySet.of(_union(comm.all_gather_object(dict(layouts))), held_by_all=False)
    _remember(comm.key, union)
    return union, voted


def _remember(group_key: int, union: _KeySet) -> None:
    with _unions_lock:
        cache = [u for u in _unions.pop(group_key, ()) if u.digest != union.digest]
        _unions[group_key] = [union, *cache][:CACHED_UNIONS]  # most recent group last
        while len(_unions) > CACHED_GROUPS:
            del _unions[next(iter(_unions))]


def _union(all_layouts: list[dict[Key, StateLayout]]) -> dict[Key, StateLayout]:
    """The union of every rank's layouts; a key with different layouts raises."""
    union: dict[Key, StateLayout] = {}
    conflicts: dict[Key, set[str]] = {}
    for layouts in all_layouts:
        for key, layout in layouts.items():
            seen = union.setdefault(key, layout)
            if seen.description != layout.description:
                conflicts.setdefault(key, {seen.description}).add(layout.description)
    if conflicts:
        details = "; ".join(
            f"{key_name(key)}: {' vs '.join(sorted(descs))}"
            for key, descs in sorted(conflicts.items())
        )
        raise KeyMismatchError(f"ranks recorded keys with different layouts: {details}")
    return union


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


def _plan(keys: _KeySet) -> _Plan:
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
    group: dist.ProcessGroup | None,
    spread: Callable[[Key], bool],
    *,
    series: Callable[[Key], bool],
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
    keys, voted = agree(comm, {k: layout for k, (layout, _) in states.items()}, vote)
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


def _flat_payload(keys: _KeySet, states: Mapping[Key, State], device: torch.device):
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
