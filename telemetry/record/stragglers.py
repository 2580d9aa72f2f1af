"""The straggler view inside the DP reduction, without gathering every rank's value.

For each tracked per-rank quantity (``StateLayout.per_rank`` of a key the caller tracks)
every rank computes its own value ``v`` (NaN where it has none) from its unreduced state,
on the state's device. The reduction's MIN all-reduce then also carries, per quantity,
``v`` (the minimum: ``rank_min``) and ``-v`` in slot ``rank % S`` of ``S = min(slots,
world)`` slots (each slot's maximum), and its SUM all-reduce the number of ranks with a
value. That is ``S + 1`` int64 and one float64 per quantity, whatever the world size.

With ``world <= slots`` every slot is one rank: the slots are every rank's value, and the
top k, ``rank_max`` and ``slowest_rank`` follow with no further collective. Otherwise
one small MIN all-reduce names ranks: for each slot that can hold one of the k slowest
(its maximum is at least the k-th largest slot maximum), the lowest rank holding the
maximum, the highest such rank (a tie) and the best value below it. When a slot's next
value could still enter the top k (two of the k slowest share a slot), one more such
round over those slots follows; each round names a new rank per slot, so at most k
rounds in all. Results are exact (ties: lowest rank first) and equal on every rank.

Per-rank series (``rank_series``) are gathered to the group's first rank only, for the
keys asked and up to :attr:`Settings.max_series` values.

The settings (:class:`Settings`) must be the same on every rank of a reduction (they size
the collectives). The chronic-straggler history is a pure function of the exports' top-k
lists, which every rank computes from the same reduced data, so it is the same on every
rank.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from telemetry.record.comm import Comm
from telemetry.record.layout import StateLayout
from telemetry.record.ordered import decode, encode
from telemetry.record.source import Key

__all__ = [
    "RankSpread",
    "Settings",
    "Stragglers",
    "configure",
    "quantities",
    "settings",
]

_log = logging.getLogger(__name__)
_warned: set[Key] = set()


@dataclass(frozen=True, slots=True)
class Settings:
    """How the straggler view is computed.

    Args:
        top_k: how many of the slowest ranks each tracked quantity names.
        history: how many of the last exports the chronic-straggler counts span.
        slots: the first straggler round spreads ranks over this many slots (rank modulo
            ``slots``; 4 int64 per slot per tracked quantity, whatever the world size).
            Two of the ``top_k`` slowest ranks in one slot cost one more small round.
        max_series: the most per-rank series (ranks x quantities) one reduction gathers
            for :func:`~telemetry.record.rank_spread.rank_series` keys; keys past it (in
            key order) keep their aggregate series and log one warning.
    """

    top_k: int = 8
    history: int = 50
    slots: int = 64
    max_series: int = 4096

    def __post_init__(self) -> None:
        for name in ("top_k", "history", "slots", "max_series"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"straggler view: {name} must be a positive int, got {value!r}")


_lock = threading.Lock()
_settings = Settings()
_history: dict[tuple[Key, str], deque[tuple[int, ...]]] = {}


def settings() -> Settings:
    """The current settings."""
    with _lock:
        return _settings


def configure(**changes: int) -> Settings:
    """Change some settings (see :class:`Settings`); return the new ones.

    Every rank must make the same change. Changing ``top_k`` or ``history`` starts the
    chronic-straggler counts afresh.
    """
    global _settings
    with _lock:
        new = replace(_settings, **changes)
        if (new.top_k, new.history) != (_settings.top_k, _settings.history):
            _history.clear()
        _settings = new
        return new


def _chronic(
    key: tuple[Key, str], top: tuple[int, ...], current: Settings
) -> tuple[tuple[tuple[int, int], ...], int]:
    """Record this export's top-k ranks of ``key``; return the ``top_k`` ranks most often in
    the top k over the last ``history`` exports (most first, lowest rank on ties) with how
    many exports each, and how many exports the history holds."""
    with _lock:
        past = _history.get(key)
        if past is None or past.maxlen != current.history:
            past = _history[key] = deque(maxlen=current.history)
        past.append(top)
        counts = Counter(rank for ranks in past for rank in ranks)
        held = len(past)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return tuple(ranked[: current.top_k]), held


@dataclass(frozen=True, slots=True)
class RankSpread:
    """One per-rank quantity across the ranks that have it.

    ``low``/``high`` are its extremes, ``slowest_rank`` the lowest rank holding ``high``;
    ``top`` the k slowest ``(rank, value)`` (most first); ``chronic`` the ranks most often
    in the top k over the last ``exports`` exports, with how many; ``values`` every rank's
    value (NaN without one), on the committing rank of a ``rank_series`` key only.
    """

    low: float
    high: float
    slowest_rank: int
    values: tuple[float, ...] = ()
    top: tuple[tuple[int, float], ...] = ()
    chronic: tuple[tuple[int, int], ...] = ()
    exports: int = 0


@dataclass(frozen=True, slots=True)
class _Quantity:
    """A tracked quantity: element indices into the flat state vector, where index ``n``
    (one past the end) holds 1.0 for a quantity without denominator or presence flag."""

    key: Key
    suffix: str
    numerator: int
    denominator: int
    present: int
    series: bool


def quantities(
    keys: Sequence[Key],
    layouts: Mapping[Key, StateLayout],
    offsets: Mapping[Key, int],
    n: int,
    spread: Callable[[Key], bool],
    series: Callable[[Key], bool],
) -> list[_Quantity]:
    """The per-rank quantities of the keys ``spread`` picks, in key order."""
    out = []
    for key in keys:
        layout = layouts[key]
        if not layout.per_rank or not spread(key):
            continue
        start, wanted = offsets[key], series(key)
        for q in layout.per_rank:
            den = n if q.denominator is None else start + q.denominator
            present = n if q.present is None else start + q.present
            out.append(_Quantity(key, q.suffix, start + q.numerator, den, present, wanted))
    return out


class Stragglers:
    """The straggler part of one reduction over ``comm`` (see the module docstring)."""

    def __init__(self, comm: Comm, qs: list[_Quantity], flat: torch.Tensor) -> None:
        self.comm, self.qs, self.settings = comm, qs, settings()
        self.slots = min(self.settings.slots, comm.world)
        ext = torch.cat([flat, torch.ones(1, dtype=flat.dtype, device=flat.device)])
        index = torch.tensor([[q.numerator, q.denominator, q.present] for q in qs]).reshape(-1, 3)
        num, den, present = ext[index.to(flat.device)].unbind(1)
        values = num / torch.where(den > 0, den, torch.nan)
        self.values = torch.where(present > 0, values, torch.nan)  # [q], on the device

    def sum_part(self) -> torch.Tensor:
        """Per quantity, 1.0 where this rank has a value (the SUM gives how many do)."""
        return (~torch.isnan(self.values)).to(torch.float64)

    def min_part(self) -> torch.Tensor:
        """int64 keys: per quantity ``v`` (for ``rank_min``), then ``[q, S]`` slots with ``-v``
        in this rank's slot."""
        missing = torch.isnan(self.values)
        slots = torch.zeros(len(self.qs), self.slots, dtype=torch.float64, device=missing.device)
        absent = torch.ones_like(slots, dtype=torch.bool)
        slots[:, self.comm.rank % self.slots] = -self.values
        absent[:, self.comm.rank % self.slots] = missing
        return torch.cat([encode(self.values, missing), encode(slots, absent).reshape(-1)])

    def finish(
        self,
        counts: np.ndarray,
        mins: np.ndarray,
        values: np.ndarray,
        held: Callable[[Key], bool],
    ) -> dict[Key, dict[str, RankSpread]]:
        """The spreads from the reduced parts (host arrays: :meth:`sum_part`'s counts, the
        decoded :meth:`min_part`, this rank's values) for the keys some rank ``held``,
        with the rounds they still need."""
        q, world, s = len(self.qs), self.comm.world, self.slots
        lows, slot_max = mins[:q], -mins[q:].reshape(q, s)  # NaN: an empty slot
        live = [i for i in range(q) if counts[i] > 0 and held(self.qs[i].key)]
        if world <= s:
            tops = {i: _best(dict(enumerate(slot_max[i])), self.settings.top_k) for i in live}
        else:
            tops = _Rounds(self, values, {i: slot_max[i] for i in live}).run()
        series = self._series(live)
        out: dict[Key, dict[str, RankSpread]] = {}
        for i in live:
            quantity, top = self.qs[i], tops[i]
            (slowest, high), extra = top[0], {}
            if world > 1:
                ranks = tuple(rank for rank, _ in top)
                name = (quantity.key, quantity.suffix)
                often, exports = _chronic(name, ranks, self.settings)
                extra = {"top": tuple(top), "chronic": often, "exports": exports}
            spread = RankSpread(float(lows[i]), high, slowest, series.get(i, ()), **extra)
            out.setdefault(quantity.key, {})[quantity.suffix] = spread
        return out

    def _series(self, live: list[int]) -> dict[int, tuple[float, ...]]:
        """Every rank's value of the ``rank_series`` quantities, on the first rank only."""
        budget, picked = self.settings.max_series, []
        for i in live:
            if not self.qs[i].series:
                continue
            if budget >= self.comm.world:
                budget -= self.comm.world
                picked.append(i)
            elif self.comm.rank == 0 and self.qs[i].key not in _warned:
                _warned.add(self.qs[i].key)
                _log.warning(
                    "%s: per-rank series of %d ranks past max_series=%d: left out",
                    self.qs[i].key,
                    self.comm.world,
                    self.settings.max_series,
                )
        if not picked:
            return {}
        gathered = self.comm.gather_to_first(self.values[picked])
        if gathered is None:
            return {}
        columns = gathered.cpu().numpy().T
        return {i: tuple(column.tolist()) for i, column in zip(picked, columns)}


def _best(candidates: Mapping[int, float], k: int) -> list[tuple[int, float]]:
    """The k slowest ``(rank, value)`` (NaN values left out), most first, lowest rank on ties."""
    known = [(rank, float(v)) for rank, v in candidates.items() if not np.isnan(v)]
    return sorted(known, key=lambda rv: (-rv[1], rv[0]))[:k]


class _Rounds:
    """The naming rounds of a world larger than the slot count (module docstring)."""

    def __init__(self, owner: Stragglers, values: np.ndarray, slot_max: dict) -> None:
        self.owner, self.values = owner, values
        self.k, self.s = owner.settings.top_k, owner.slots
        self.found: dict[int, dict[int, float]] = {i: {} for i in slot_max}
        self.active: dict[int, dict[int, float]] = {}
        for i, maxima in slot_max.items():
            nonempty = {slot: float(m) for slot, m in enumerate(maxima) if not np.isnan(m)}
            ranked = sorted(nonempty.values(), reverse=True)
            tau = ranked[self.k - 1] if len(ranked) >= self.k else -np.inf
            self.active[i] = {slot: m for slot, m in nonempty.items() if m >= tau}

    def run(self) -> dict[int, list[tuple[int, float]]]:
        while any(self.active.values()):
            self._round()
        return {i: _best(found, self.k) for i, found in self.found.items()}

    def _round(self) -> None:
        order = [(i, slot) for i, active in self.active.items() for slot in sorted(active)]
        rank = self.owner.comm.rank
        mine = rank % self.s
        contribution = np.zeros((3, len(order)))
        absent = np.ones((3, len(order)), dtype=bool)
        for j, (i, slot) in enumerate(order):
            v = self.values[i]
            if slot != mine or rank in self.found[i] or np.isnan(v):
                continue
            top = self.active[i][slot]
            if v == top:  # a holder of the slot's maximum: lowest and highest such rank
                contribution[:2, j], absent[:2, j] = (rank, -rank), False
            else:  # below it: the best value under the maximum
                contribution[2, j], absent[2, j] = -v, False
        device = self.owner.comm.device
        values = torch.from_numpy(contribution).to(device)
        keys = encode(values, torch.from_numpy(absent).to(device))
        keys = self.owner.comm.all_reduce(keys.reshape(-1), dist.ReduceOp.MIN)
        first, last, below = decode(keys).cpu().numpy().reshape(3, len(order))
        following: dict[int, dict[int, tuple[float, int]]] = {i: {} for i in self.active}
        for j, (i, slot) in enumerate(order):
            winner = int(first[j])
            self.found[i][winner] = self.active[i][slot]
            if -last[j] != winner:  # another rank ties at the maximum: a higher rank
                following[i][slot] = (self.active[i][slot], winner + self.s)
            elif not np.isnan(below[j]):
                following[i][slot] = (-below[j], self._lowest_unnamed(i, slot))
        self.active = {i: self._contenders(i, nxt) for i, nxt in following.items()}

    def _lowest_unnamed(self, i: int, slot: int) -> int:
        rank = slot
        while rank in self.found[i]:
            rank += self.s
        return rank

    def _contenders(self, i: int, following: dict[int, tuple[float, int]]) -> dict[int, float]:
        """The slots whose next rank (value, lowest possible rank) could enter the top k."""
        top = _best(self.found[i], self.k)
        if len(top) < self.k:
            return {slot: value for slot, (value, _) in following.items()}
        rank_k, value_k = top[-1]
        return {
            slot: value
            for slot, (value, lowest) in following.items()
            if value > value_k or (value == value_k and lowest < rank_k)
        }
