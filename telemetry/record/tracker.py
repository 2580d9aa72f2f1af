"""``DistributedStatsTracker``: AReaL's stats tracker with compact state and one DP reduction.

Keys are ``<tracker name>/<scope>/.../<key>``. A stat is accumulated per call into a
fixed-size on-device state (see :mod:`telemetry.record.accumulate`); ``export`` reduces every
key across the data-parallel group with a constant number of collectives and returns
AReaL's flat dict as a :class:`~telemetry.model.snapshot.Stats`.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import (
    InvalidValueError,
    UnknownDenominatorError,
)
from telemetry.model.snapshot import Point, StatReduce
from telemetry.record import accumulate, checks, export, kernels
from telemetry.record.points import point_for
from telemetry.record.reduce import State, StateLayout
from telemetry.record.stats import Stats


class ReduceType(Enum):
    """AReaL's reduce types; SCALAR is what ``scalar()`` records."""

    AVG_MIN_MAX = "avg_min_max"
    AVG = "avg"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    SCALAR = "scalar"


_STAT_TYPES = {
    ReduceType.AVG_MIN_MAX: StatReduce.AVG_MIN_MAX,
    ReduceType.AVG: StatReduce.AVG,
    ReduceType.SUM: StatReduce.SUM,
    ReduceType.MIN: StatReduce.MIN,
    ReduceType.MAX: StatReduce.MAX,
}


class DistributedStatsTracker:
    """One namespace of metrics (``name`` is the first key segment, "" for the default).

    Thread-safe; the scope stack is per thread and per asyncio task.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._scope: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"rltel_scope_{name or 'default'}_{id(self)}", default=()
        )
        self._stats: dict[str, _StatEntry] = {}
        self._banks: dict[torch.device, accumulate.StatBank] = {}
        self._scalars: dict[str, accumulate.ScalarState] = {}
        self._denominators: dict[str, torch.Tensor] = {}
        self._masks: dict[str, kernels.MaskBits] = {}
        self._bounds: dict[str, tuple[float, ...]] = {}

    # -- keys and scopes -------------------------------------------------------------

    def full_key(self, key: str) -> str:
        """``key`` under this tracker's name and the current scope."""
        return "/".join(part for part in (self.name, *self._scope.get(), key) if part)

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest keys recorded inside under ``name``; exception-safe, per thread/task."""
        token = self._scope.set((*self._scope.get(), name))
        try:
            yield
        finally:
            self._scope.reset(token)

    @contextmanager
    def record_timing(self, name: str) -> Iterator[None]:
        """Record the wall time of the block as scalar ``timeperf/<name>`` (seconds)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            with self.scope("timeperf"):
                self.scalar(**{name: time.perf_counter() - start})

    def set_bucket_bounds(self, name: str, bounds: Sequence[float] | None) -> None:
        """Give stat ``name`` (relative to the current scope) explicit histogram buckets.

        Raises:
            InvalidValueError: bounds are not strictly increasing finite numbers.
        """
        key = self.full_key(name)
        if bounds is None:
            self._bounds.pop(key, None)
            return
        values = checks.bucket_bounds(key, bounds)
        with self._lock:
            if key in self._stats:
                raise InvalidValueError(f"{key!r}: set bucket bounds before recording the stat")
            self._bounds[key] = values

    # -- recording --------------------------------------------------------------------

    def denominator(self, **masks: torch.Tensor) -> None:
        """Declare boolean masks; each is exported as its SUM (the valid count).

        Raises:
            MaskTypeError: a mask is not a boolean tensor.
            InvalidValueError: a mask is empty.
        """
        for name, given in masks.items():
            key = self.full_key(name)
            mask = checks.mask(key, given)
            count = mask.sum().to(torch.float64).reshape(1)  # an integer sum: 3x faster
            with self._lock:
                self._masks[key] = kernels.MaskBits(mask, count)
                total = self._denominators.get(key)
                if total is None:
                    self._denominators[key] = count
                else:
                    total += count.to(total.device)

    def stat(
        self,
        denominator: str,
        reduce_type: ReduceType | None = None,
        **tensors: torch.Tensor,
    ) -> None:
        """Accumulate masked tensors over the declared ``denominator`` mask.

        Args:
            denominator: name of a mask declared with :meth:`denominator` in this scope.
            reduce_type: AVG_MIN_MAX (default), AVG, SUM, MIN or MAX.
            tensors: float tensors with the denominator's shape.

        Raises:
            UnknownDenominatorError, ShapeMismatchError, InvalidValueError: naming the key.
        """
        reduce = self._stat_reduce(reduce_type, tensors)
        mask_key = self.full_key(denominator)
        declared = self._masks.get(mask_key)
        if declared is None:
            first = self.full_key(next(iter(tensors), "?"))
            raise UnknownDenominatorError(
                f"{first!r}: unknown denominator {mask_key!r}; declared: "
                f"{sorted(self._masks) or 'none'}"
            )
        mask = declared.mask
        keys = [self.full_key(name) for name in tensors]
        values = [
            checks.stat_value(key, value, mask, mask_key)
            for key, value in zip(keys, tensors.values())
        ]
        with self._lock:
            for key in keys:  # every check before anything is recorded
                self._check_entry(key, reduce, mask.device)
            by_dtype: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
            for key, value in zip(keys, values):
                self._add_entry(key, reduce, mask.device)
                by_dtype.setdefault(value.dtype, []).append((key, value.detach()))
            bank = self._banks.get(mask.device)
            if bank is None:
                bank = self._banks[mask.device] = accumulate.StatBank(mask.device)
            for group in by_dtype.values():
                bank.fold(
                    tuple(key for key, _ in group),
                    declared,
                    [value.reshape(-1) for _, value in group],
                )
            for key, value in zip(keys, values):
                buckets = self._stats[key].buckets
                if buckets is not None:
                    buckets += accumulate.bucket_counts(value.detach(), mask, self._bounds[key])

    stat_compact = stat

    def fold_moments(
        self,
        states: Mapping[str, torch.Tensor],
        reduce_type: ReduceType | None = None,
    ) -> None:
        """Fold masked moments that a producer reduced itself into stats.

        For producers that derive many keys from a few per-token quantities: each value
        is a float64 tensor ``[sum, count, min, -max, *bucket_counts]`` on one device,
        the state ``stat()`` would have folded (bucket counts exactly where the key has
        bucket bounds). An empty state is ``[0, 0, inf, inf]``.

        Raises:
            InvalidValueError: a state is not float64, has the wrong length, or its key
                was recorded differently before; naming the key.
        """
        reduce = self._stat_reduce(reduce_type, states)
        keys = [self.full_key(name) for name in states]
        device = None
        for key, state in zip(keys, states.values()):
            n_buckets = len(self._bounds[key]) + 1 if key in self._bounds else 0
            checks.moment_state(key, state, n_buckets)
            device = state.device if device is None else device
            if state.device != device:
                raise InvalidValueError(f"{key!r}: state on {state.device}, others on {device}")
        if device is None:
            return
        with self._lock:
            for key in keys:
                self._check_entry(key, reduce, device)
            for key in keys:
                self._add_entry(key, reduce, device)
            bank = self._banks.get(device)
            if bank is None:
                bank = self._banks[device] = accumulate.StatBank(device)
            values = list(states.values())
            bank.merge(tuple(keys), torch.stack([state[:4] for state in values]))
            for key, state in zip(keys, values):
                buckets = self._stats[key].buckets
                if buckets is not None:
                    buckets += state[4:]

    def bucket_bounds(self, name: str) -> tuple[float, ...]:
        """The bucket bounds of stat ``name`` (current scope); empty when it has none."""
        return self._bounds.get(self.full_key(name), ())

    def declared_mask(self, name: str) -> kernels.MaskBits:
        """The mask declared as denominator ``name`` in the current scope, with its count.

        Raises:
            UnknownDenominatorError: no such denominator was declared.
        """
        key = self.full_key(name)
        declared = self._masks.get(key)
        if declared is None:
            raise UnknownDenominatorError(f"unknown denominator {key!r}")
        return declared

    def scalar(self, **values: float | torch.Tensor) -> None:
        """Record single values; exported as the count-weighted mean plus ``key__count``.

        Raises:
            InvalidValueError: a value is not a number or a one-element tensor.
        """
        for name, value in values.items():
            key = self.full_key(name)
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise InvalidValueError(
                        f"scalar {key!r}: expected one element, got shape {tuple(value.shape)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise InvalidValueError(
                    f"scalar {key!r}: expected a number, got {type(value).__name__}"
                )
            with self._lock:
                if key in self._stats:
                    raise InvalidValueError(f"{key!r}: recorded as a stat, now as a scalar")
                state = self._scalars.setdefault(key, accumulate.ScalarState())
                if isinstance(value, torch.Tensor):
                    state.add_tensor(value)
                else:
                    state.add(float(value))

    def _stat_reduce(self, reduce_type, tensors) -> StatReduce:
        reduce_type = ReduceType.AVG_MIN_MAX if reduce_type is None else reduce_type
        if reduce_type not in _STAT_TYPES:
            first = self.full_key(next(iter(tensors), "?"))
            raise InvalidValueError(f"{first!r}: reduce type {reduce_type} is not valid for stat()")
        return _STAT_TYPES[reduce_type]

    def _check_entry(self, key: str, reduce: StatReduce, device: torch.device) -> None:
        if key in self._scalars:
            raise InvalidValueError(f"{key!r}: recorded as a scalar, now as a stat")
        entry = self._stats.get(key)
        if entry is not None and entry.reduce is not reduce:
            raise InvalidValueError(
                f"{key!r}: recorded with reduce type {entry.reduce.value}, now {reduce.value}"
            )
        if entry is not None and entry.device != device:
            raise InvalidValueError(f"{key!r}: recorded on {entry.device}, now on {device}")

    def _add_entry(self, key: str, reduce: StatReduce, device: torch.device) -> None:
        if key in self._stats:
            return
        values = self._bounds.get(key, ())
        buckets = None
        if values:
            buckets = torch.zeros(len(values) + 1, dtype=torch.float64, device=device)
        self._stats[key] = _StatEntry(reduce, device, buckets)

    # -- export -----------------------------------------------------------------------

    def collect_states(self, key: str | None = None, reset: bool = True) -> dict[str, State]:
        """This window's states (keys starting with ``key`` if given), cleared if ``reset``."""
        with self._lock:
            stats, scalars, denoms = self._stats, self._scalars, self._denominators
            kept_stats, kept_scalars, kept_denoms, kept_masks = {}, {}, {}, {}
            if key is not None:
                stats, kept_stats = _split_prefix(stats, key)
                scalars, kept_scalars = _split_prefix(scalars, key)
                denoms, kept_denoms = _split_prefix(denoms, key)
                _, kept_masks = _split_prefix(self._masks, key)
            taken: dict[str, torch.Tensor] = {}
            for device, bank in self._banks.items():
                keys = [k for k, entry in stats.items() if entry.device == device]
                taken.update(bank.take(keys, reset))
            if reset:
                self._stats, self._scalars = kept_stats, kept_scalars
                self._denominators, self._masks = kept_denoms, kept_masks
            else:
                denoms = {k: t.clone() for k, t in denoms.items()}
        states: dict[str, State] = {}
        for name, entry in stats.items():
            state = taken[name]
            if entry.buckets is not None:
                state = torch.cat([state, entry.buckets.clone()])
            states[name] = (accumulate.stat_layout(entry.reduce.value, state.numel() - 4), state)
        for name, scalar in scalars.items():
            states[name] = (accumulate.SCALAR_LAYOUT, scalar.state())
        for name, count in denoms.items():
            states[name] = (accumulate.DENOMINATOR_LAYOUT, count)
        return states

    def build_points_with_layouts(
        self, reduced: Mapping[str, tuple[StateLayout, np.ndarray]]
    ) -> list[Point]:
        """Points for reduced states produced by :meth:`collect_states` on any rank."""
        points: list[Point] = []
        for key, (layout, values) in sorted(reduced.items()):
            point = point_for(key, layout, values, self._bounds.get(key, ()))
            if point is not None:
                points.append(point)
        return points

    def reset(self) -> None:
        """Drop everything recorded since the last export."""
        self.collect_states()

    def export(
        self,
        key: str | None = None,
        reduce_group: dist.ProcessGroup | None = None,
        reset: bool = True,
    ) -> Stats:
        """Reduce this tracker's keys over ``reduce_group`` and return AReaL's flat dict.

        Every rank of the group must call it; all receive the same result.
        """
        return export.export_sources([self], type(self), key, reduce_group, reset)


class _StatEntry(NamedTuple):
    """A masked stat of the current window: its reduce type, device and bucket counts."""

    reduce: StatReduce
    device: torch.device
    buckets: torch.Tensor | None


def _split_prefix(mapping: dict, prefix: str) -> tuple[dict, dict]:
    taken = {k: v for k, v in mapping.items() if k == prefix or k.startswith(prefix + "/")}
    kept = {k: v for k, v in mapping.items() if k not in taken}
    return taken, kept
