"""What a tracker accumulated since its last export, and how it becomes states.

:class:`Window` holds one tracker's recordings by kind: masked stats (rows of per-device
:class:`~telemetry.record.accumulate.StatBank`\\ s, plus bucket counts), scalar streams and
denominator counts, with the declared masks. :meth:`Window.take` moves the keys of an
export out (under the tracker's lock), and their ``states()`` gives them their layouts for
the DP reduction (outside it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import StatReduce
from telemetry.record import accumulate, kernels
from telemetry.record.layout import DENOMINATOR_LAYOUT, SCALAR_LAYOUT, State, stat_layout

__all__ = ["Window"]


class _StatEntry(NamedTuple):
    """A masked stat of the current window: its reduce type, device and bucket counts."""

    reduce: StatReduce
    device: torch.device
    buckets: torch.Tensor | None


class Window:
    """One tracker's accumulated state by key; not thread-safe (the tracker locks)."""

    def __init__(self) -> None:
        self.stats: dict[str, _StatEntry] = {}
        self.banks: dict[torch.device, accumulate.StatBank] = {}
        self.scalars: dict[str, accumulate.ScalarState] = {}
        self.denominators: dict[str, torch.Tensor] = {}
        self.masks: dict[str, kernels.MaskBits] = {}
        self.groups: dict[str, object] = {}
        """Keys recorded with a per-key ``reduce_group`` (AReaL's override), and that group."""
        self.owners: dict[str, str] = {}
        """Keys a producer recorded, and that producer (:mod:`telemetry.record.produce`)."""

    def bank(self, device: torch.device) -> accumulate.StatBank:
        """The stat bank of ``device``, made on first use."""
        bank = self.banks.get(device)
        if bank is None:
            bank = self.banks[device] = accumulate.StatBank(device)
        return bank

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
    scalars: Mapping[str, accumulate.ScalarState]
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
