"""What a tracker accumulated since its last export: compact on-device state, O(1) per key.

:class:`Window` holds one tracker's recordings by kind: masked stats, scalar streams
(each a running state kept on the host, with a device part for tensors) and denominator
counts, with the declared masks. A masked statistic keeps ``[sum, count, min, -max]`` as
one float64 row of a per-device bank, plus ``bucket_counts`` where bounds are configured.
Storing ``-max`` lets one ``minimum`` update both extrema; the layout
(:mod:`telemetry.record.layout`) tells the DP reduction which element takes which op.
Nothing here reads a tensor value on the host, so recording never synchronises.
:meth:`Window.take` moves the keys of an export out (under the tracker's lock), and their
``states()`` gives them their layouts for the DP reduction (outside it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import StatReduce
from telemetry.record import kernels
from telemetry.record.layout import DENOMINATOR_LAYOUT, SCALAR_LAYOUT, State, stat_layout
from telemetry.record.scratch import Scratch

__all__ = ["Window", "bucket_counts", "to_device"]

_INF = float("inf")


def bucket_counts(x: torch.Tensor, mask: torch.Tensor, bounds: Sequence[float]) -> torch.Tensor:
    """OTel explicit-bucket counts over ``mask``: bucket i is ``(bounds[i-1], bounds[i]]``.

    NaN values land in the last bucket so that the counts add up to the mask count. One
    comparison per bound: branch-free, unlike a binary search per value (``bucketize``),
    whose speed depends on the data.
    """
    values, valid = x.reshape(-1), mask.reshape(-1)
    above = torch.stack([((values > b) & valid).sum() for b in bounds])
    nan = (values.isnan() & valid).sum()
    total = valid.sum()
    return torch.cat([(total - nan - above[:1]), above[:-1] - above[1:], above[-1:] + nan]).to(
        torch.float64
    )


def _fold_into(state: torch.Tensor, other: torch.Tensor) -> None:
    """Fold one ``[sum, count, min, -max]`` state into another, in place."""
    state[:2] += other[:2]
    torch.minimum(state[2:4], other[2:4], out=state[2:4])


class _StatBank:
    """The masked-stat states of one device: a ``[rows, 4]`` float64 tensor, a row per key.

    Rows persist across windows (their index tensors are built once per key tuple, so a
    window never copies indices to the device again); ``take`` returns the touched rows'
    states and resets them. One ``stat()`` call costs a gather, one kernel and a scatter,
    whatever the number of its keys.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.data = torch.empty(0, 4, dtype=torch.float64, device=device)
        self.rows: dict[str, int] = {}
        self._indices: dict[tuple[str, ...], torch.Tensor] = {}
        self.scratch = Scratch(device)

    def _index(self, keys: tuple[str, ...]) -> torch.Tensor:
        index = self._indices.get(keys)
        if index is None:
            new = [key for key in dict.fromkeys(keys) if key not in self.rows]
            if new:
                first = len(self.rows)
                self.rows.update((key, first + i) for i, key in enumerate(new))
                self.data = torch.cat([self.data, _empty_rows(len(new), self.device)])
            rows = torch.tensor([self.rows[k] for k in keys], dtype=torch.int64)
            index = to_device(rows, self.device)
            self._indices[keys] = index
        return index

    def fold(
        self,
        keys: tuple[str, ...],
        masks: kernels.MaskBits,
        xs: Sequence[torch.Tensor],
    ) -> None:
        """Accumulate the 1-D tensors ``xs`` (one dtype) over ``masks`` into ``keys``."""
        index = self._index(keys)
        updated = kernels.fold(self.data.index_select(0, index), masks, xs, self.scratch)
        self.data.index_copy_(0, index, updated)

    def merge(self, keys: tuple[str, ...], states: torch.Tensor) -> None:
        """Fold precomputed ``[K, 4]`` states ``[sum, count, min, -max]`` into ``keys``."""
        index = self._index(keys)
        current = self.data.index_select(0, index)
        current[:, :2] += states[:, :2]
        torch.minimum(current[:, 2:], states[:, 2:], out=current[:, 2:])
        self.data.index_copy_(0, index, current)

    def take(self, keys: Sequence[str], reset: bool) -> dict[str, torch.Tensor]:
        """The states of ``keys`` (copies); with ``reset`` their rows return to empty."""
        keys = tuple(keys)
        if not keys:
            return {}
        index = self._index(keys)
        taken = self.data.index_select(0, index)
        if reset:
            self.data.index_copy_(0, index, _empty_rows(len(keys), self.device))
        return dict(zip(keys, taken.unbind(0)))


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a small host tensor to ``device`` without a host synchronisation.

    On CUDA the copy goes through pinned memory with ``non_blocking=True`` (a pageable
    copy would block the host until the device queue drains).
    """
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def _empty_rows(n: int, device: torch.device) -> torch.Tensor:
    rows = torch.zeros(n, 4, dtype=torch.float64, device=device)
    rows[:, 2:] = _INF
    return rows


class _ScalarState:
    """Running ``[sum, count, min, -max]`` of a scalar stream, kept on the host.

    Python numbers are folded in as floats; tensors are folded in on their device
    without a sync and joined with the host part at export.
    """

    __slots__ = ("_device_state", "_host")

    def __init__(self) -> None:
        self._host = [0.0, 0.0, _INF, _INF]
        self._device_state: torch.Tensor | None = None

    def add(self, value: float) -> None:
        host = self._host
        host[0] += value
        host[1] += 1.0
        # Comparisons with NaN are False: propagate NaN explicitly, as torch does.
        host[2] = value if (value != value or value < host[2]) else host[2]
        negated = -value
        host[3] = negated if (negated != negated or negated < host[3]) else host[3]

    def add_tensor(self, value: torch.Tensor) -> None:
        value = value.detach().reshape(()).to(torch.float64)
        sample = torch.stack([value, torch.ones_like(value), value, -value])
        if self._device_state is None:
            self._device_state = _empty_rows(1, value.device)[0]
        _fold_into(self._device_state, sample)

    def merge(self, other: _ScalarState) -> None:
        """Fold ``other``'s stream into this one (its device part stays on its device)."""
        host = torch.tensor(self._host, dtype=torch.float64)
        _fold_into(host, torch.tensor(other._host, dtype=torch.float64))
        self._host = host.tolist()
        if other._device_state is not None:
            if self._device_state is None:
                self._device_state = other._device_state.clone()
            else:
                _fold_into(self._device_state, other._device_state.to(self._device_state.device))

    def state(self) -> torch.Tensor:
        """The combined state as a float64 tensor (one copy from the device, if any)."""
        host = torch.tensor(self._host, dtype=torch.float64)
        if self._device_state is None:
            return host
        _fold_into(host, self._device_state.cpu())
        return host


class _StatEntry(NamedTuple):
    """A masked stat of the current window: its reduce type, device and bucket counts."""

    reduce: StatReduce
    device: torch.device
    buckets: torch.Tensor | None


class Window:
    """One tracker's accumulated state by key; not thread-safe (the tracker locks)."""

    def __init__(self) -> None:
        self.stats: dict[str, _StatEntry] = {}
        self.banks: dict[torch.device, _StatBank] = {}
        self.scalars: dict[str, _ScalarState] = {}
        self.denominators: dict[str, torch.Tensor] = {}
        self.masks: dict[str, kernels.MaskBits] = {}
        self.groups: dict[str, object] = {}
        """Keys recorded with a per-key ``reduce_group`` (AReaL's override), and that group."""
        self.owners: dict[str, str] = {}
        """Keys a producer recorded, and that producer (:mod:`telemetry.record.produce`)."""

    def bank(self, device: torch.device) -> _StatBank:
        """The stat bank of ``device``, made on first use."""
        bank = self.banks.get(device)
        if bank is None:
            bank = self.banks[device] = _StatBank(device)
        return bank

    def scalar(self, key: str) -> _ScalarState:
        """The scalar stream ``key``, made on first use."""
        state = self.scalars.get(key)
        if state is None:
            state = self.scalars[key] = _ScalarState()
        return state

    def add_denominator(self, key: str, count: torch.Tensor) -> None:
        """Add a mask's valid ``count`` (``[1]`` float64) to denominator ``key``."""
        total = self.denominators.get(key)
        if total is None:
            self.denominators[key] = count
        else:
            total += count.to(total.device)

    def set_group(self, key: str, group: object) -> None:
        """Remember ``key``'s per-key reduce group, if one is given (AReaL keeps the last)."""
        if group is not None:
            self.groups[key] = group

    def kind(self, key: str) -> str | None:
        """What ``key`` holds here: ``"a stat"``, ``"a scalar"``, ``"a denominator"`` or None."""
        if key in self.stats:
            return "a stat"
        if key in self.scalars:
            return "a scalar"
        return "a denominator" if key in self.denominators else None

    def check_kind(self, key: str, kind: str) -> None:
        """Raise if ``key`` holds another kind than ``kind`` (as :meth:`kind` names it).

        Raises:
            InvalidValueError: naming the key and both kinds.
        """
        held = self.kind(key)
        if held is not None and held != kind:
            raise InvalidValueError(f"{key!r}: recorded as {held}, now as {kind}")

    def check_stat(self, key: str, reduce: StatReduce, device: torch.device) -> None:
        """Raise if ``key`` was recorded otherwise in this window.

        Raises:
            InvalidValueError: ``key`` is a scalar or a denominator, or a stat of another
                reduce type or device.
        """
        self.check_kind(key, "a stat")
        entry = self.stats.get(key)
        if entry is not None and entry.reduce is not reduce:
            raise InvalidValueError(
                f"{key!r}: recorded with reduce type {entry.reduce.value}, now {reduce.value}"
            )
        if entry is not None and entry.device != device:
            raise InvalidValueError(f"{key!r}: recorded on {entry.device}, now on {device}")

    def add_stat(
        self, key: str, reduce: StatReduce, device: torch.device, bounds: tuple[float, ...]
    ) -> None:
        """Start stat ``key`` (with bucket counts where ``bounds`` are set), if new."""
        if key in self.stats:
            return
        buckets = None
        if bounds:
            buckets = torch.zeros(len(bounds) + 1, dtype=torch.float64, device=device)
        self.stats[key] = _StatEntry(reduce, device, buckets)

    def drop(self, keys: list[str]) -> None:
        """Forget ``keys`` (their stat rows return to empty)."""
        for device, bank in self.banks.items():
            bank.take([k for k in keys if k in self.stats and self.stats[k].device == device], True)
        for mapping in (self.stats, self.scalars, self.denominators, self.masks, self.groups):
            for key in keys:
                mapping.pop(key, None)
        for key in keys:
            self.owners.pop(key, None)

    def take(self, prefix: str | None, reset: bool) -> _Taken:
        """The keys under ``prefix`` (all if None); with ``reset`` they leave the window."""
        stats, scalars, denoms = self.stats, self.scalars, self.denominators
        groups = self.groups
        kept_stats, kept_scalars, kept_denoms, kept_masks, kept_groups = {}, {}, {}, {}, {}
        kept_owners: dict[str, str] = {}
        if prefix is not None:
            stats, kept_stats = _split_prefix(stats, prefix)
            scalars, kept_scalars = _split_prefix(scalars, prefix)
            denoms, kept_denoms = _split_prefix(denoms, prefix)
            _, kept_masks = _split_prefix(self.masks, prefix)
            groups, kept_groups = _split_prefix(groups, prefix)
            _, kept_owners = _split_prefix(self.owners, prefix)
        rows: dict[str, torch.Tensor] = {}
        for device, bank in self.banks.items():
            keys = [k for k, entry in stats.items() if entry.device == device]
            rows.update(bank.take(keys, reset))
        if reset:
            self.stats, self.scalars = kept_stats, kept_scalars
            self.denominators, self.masks = kept_denoms, kept_masks
            self.groups, self.owners = kept_groups, kept_owners
        else:
            denoms = {k: t.clone() for k, t in denoms.items()}
        return _Taken(stats, rows, scalars, denoms, dict(groups))


@dataclass(frozen=True, slots=True)
class _Taken:
    """The keys of one export, out of the window."""

    stats: Mapping[str, _StatEntry]
    rows: Mapping[str, torch.Tensor]
    scalars: Mapping[str, _ScalarState]
    denominators: Mapping[str, torch.Tensor]
    groups: Mapping[str, object]
    """The per-key reduce groups of these keys (keys without one are not listed)."""

    def states(self) -> dict[str, State]:
        """Every key's state with its layout (scalars on a device are copied here)."""
        states: dict[str, State] = {}
        for name, entry in self.stats.items():
            state = self.rows[name]
            n_buckets = 0
            if entry.buckets is not None:
                state = torch.cat([state, entry.buckets.clone()])
                n_buckets = entry.buckets.numel()
            states[name] = (stat_layout(entry.reduce, n_buckets), state)
        for name, scalar in self.scalars.items():
            states[name] = (SCALAR_LAYOUT, scalar.state())
        for name, count in self.denominators.items():
            states[name] = (DENOMINATOR_LAYOUT, count)
        return states


def _split_prefix(mapping: dict, prefix: str) -> tuple[dict, dict]:
    taken = {k: v for k, v in mapping.items() if k == prefix or k.startswith(prefix + "/")}
    kept = {k: v for k, v in mapping.items() if k not in taken}
    return taken, kept
