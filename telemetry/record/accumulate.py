"""Compact on-device accumulators: O(1) state per key, no device-to-host sync.

A masked statistic keeps ``[sum, count, min, -max]`` as one float64 row of a per-device
:class:`StatBank`, plus ``bucket_counts`` where bounds are configured. Storing ``-max``
lets one ``minimum`` update both extrema; the layout (:mod:`telemetry.record.layout`)
tells the DP reduction which element takes which op. Nothing here reads a tensor value on
the host, so recording never synchronises.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from telemetry.record import kernels
from telemetry.record.scratch import Scratch

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


class StatBank:
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


class ScalarState:
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

    def merge(self, other: ScalarState) -> None:
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
