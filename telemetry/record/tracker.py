"""``DistributedStatsTracker``: AReaL's stats tracker with compact state and one DP reduction.

The one tracker class: AReaL's surface (``areal.utils.stats_tracker.DistributedStatsTracker``:
``scope``, ``scope_func_wrapper``, ``disable_scope``, ``record_timing``, ``denominator``,
``stat``, ``scalar``, ``export``) on rltel's core. Keys follow AReaL's rules (below). A
stat is accumulated per call into a fixed-size on-device state (see
:mod:`telemetry.record.accumulate`); ``export`` reduces every key across the data-parallel
group with a constant number of collectives and returns AReaL's flat dict as a
:class:`~telemetry.record.stats.Stats`. A tracker is a
:class:`~telemetry.record.source.StateSource`, as every other producer.

Keys are ``<tracker name>/<scope>/.../<key>``. The scope stack is per thread and per
asyncio task. As in AReaL's ``areal.utils.stats_tracker``:

- ``scope(name)`` strips ``/`` from the ends of ``name`` (and the tracker name too);
- inside ``disable_scope()`` keys have no enclosing scope and no tracker name (AReaL clears
  its whole scope stack, which holds the name too); scopes opened inside it still nest;
- a timing is ``timeperf/<name>`` (:func:`timing_key`), recorded bare: the same key in any
  scope and any named tracker.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from telemetry.model.errors import (
    InvalidValueError,
    UnknownDenominatorError,
)
from telemetry.model.snapshot import Point, StatReduce
from telemetry.model.units import TIMING_SCOPE
from telemetry.record import accumulate, checks, export, kernels, phase, produce
from telemetry.record.accumulate import Window
from telemetry.record.layout import Reduced
from telemetry.record.points import tracker_points
from telemetry.record.source import TRACKER_ID, Collected
from telemetry.record.stats import Stats

ReduceType = StatReduce
"""AReaL's name for the reduce-type enum; ``SCALAR`` is what ``scalar()`` records."""

F = TypeVar("F", bound=Callable[..., Any])


def timing_key(name: str) -> str:
    """AReaL's key of ``record_timing(name)``: ``timeperf/<name>``."""
    return f"{TIMING_SCOPE}/{name}"


class DistributedStatsTracker:
    """One namespace of metrics (``name``, stripped of ``/``, is the first key segment; ""
    for the default).

    Thread-safe; the scope stack is per thread and per asyncio task.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name.strip("/")
        tag = f"{self.name or 'default'}_{id(self)}"
        self._scope: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"rltel_scope_{tag}", default=()
        )
        self._bare: contextvars.ContextVar[bool] = contextvars.ContextVar(
            f"rltel_bare_{tag}", default=False
        )
        self.source_id = TRACKER_ID + self.name
        self._lock = threading.Lock()
        self._window = Window()
        self._bounds: dict[str, tuple[float, ...]] = {}
        self.refusals = produce.Refusals()
        """Producer calls refused or taken back (:mod:`telemetry.record.produce`)."""

    # -- keys and scopes (AReaL's rules: the module docstring) ------------------------

    def full_key(self, key: str) -> str:
        """``key`` under this tracker's name and the current scope (inside
        :meth:`disable_scope`, under its scopes only)."""
        if self._bare.get():
            return "/".join(part for part in (*self._scope.get(), key) if part)
        return "/".join(part for part in (self.name, *self._scope.get(), key) if part)

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Nest keys recorded inside under ``name`` (``/`` stripped from its ends);
        exception-safe, per thread/task."""
        token = self._scope.set((*self._scope.get(), name.strip("/")))
        try:
            yield
        finally:
            self._scope.reset(token)

    @contextmanager
    def disable_scope(self) -> Iterator[None]:
        """Record bare keys inside (no enclosing scope, no tracker name), as AReaL does;
        scopes opened inside still nest."""
        scope_token = self._scope.set(())
        bare_token = self._bare.set(True)
        try:
            yield
        finally:
            self._bare.reset(bare_token)
            self._scope.reset(scope_token)

    def scope_func_wrapper(self, name: str) -> Callable[[F], F]:
        """A decorator running the function (or coroutine function) inside ``scope(name)``."""

        def decorator(func: F) -> F:
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    with self.scope(name):
                        return await func(*args, **kwargs)

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.scope(name):
                    return func(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorator

    @contextmanager
    def record_timing(self, key: str) -> Iterator[None]:
        """Record the block's wall time (seconds) as scalar ``timeperf/<key>``: AReaL's key,
        the same in any scope and any named tracker."""
        start = time.perf_counter()
        phase.enter(key)
        try:
            yield
        finally:
            phase.leave(key)
            elapsed = time.perf_counter() - start
            with self.disable_scope():
                self.scalar(**{timing_key(key): elapsed})

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
            if key in self._window.stats:
                raise InvalidValueError(f"{key!r}: set bucket bounds before recording the stat")
            self._bounds[key] = values

    # -- recording --------------------------------------------------------------------

    def denominator(self, *, reduce_group: object = None, **masks: torch.Tensor) -> None:
        """Declare boolean masks; each is exported as its SUM (the valid count).

        ``reduce_group`` (AReaL's per-key override) reduces these keys over that group
        instead of the export's (see :meth:`export`).

        Raises:
            MaskTypeError: a mask is not a boolean tensor.
            InvalidValueError: a mask is empty, or its key holds a stat or a scalar.
        """
        checks.reduce_group(self.full_key(next(iter(masks), "?")), reduce_group)
        checked = []
        for name, given in masks.items():  # every mask is checked before any is recorded
            key = self.full_key(name)
            mask = checks.mask(key, given)  # an integer sum: 3x faster
            checked.append((key, mask, mask.sum().to(torch.float64).reshape(1)))
        with self._lock:
            window = produce.target(self, self._window, self.refusals, [c[0] for c in checked])
            for key, _, _ in checked:
                window.check_kind(key, "a denominator")
            for key, mask, count in checked:
                window.masks[key] = kernels.MaskBits(mask, count)
                window.set_group(key, reduce_group)
                window.add_denominator(key, count)

    def stat(
        self,
        denominator: str,
        reduce_type: ReduceType | None = None,
        *,
        reduce_group: object = None,
        **tensors: torch.Tensor,
    ) -> None:
        """Accumulate masked tensors over the declared ``denominator`` mask.

        Args:
            denominator: name of a mask declared with :meth:`denominator` in this scope.
            reduce_type: AVG_MIN_MAX (default), AVG, SUM, MIN or MAX (not SCALAR).
            reduce_group: AReaL's per-key override: reduce these keys over this group
                instead of the export's.
            tensors: float tensors with the denominator's shape.

        Raises:
            UnknownDenominatorError, ShapeMismatchError, InvalidValueError: naming the key.
        """
        first = self.full_key(next(iter(tensors), "?"))
        reduce = checks.stat_reduce(first, reduce_type)
        checks.reduce_group(first, reduce_group)
        mask_key = self.full_key(denominator)
        masks = self._masks()
        declared = masks.get(mask_key)
        if declared is None:
            raise UnknownDenominatorError(
                f"{first!r}: unknown denominator {mask_key!r}; declared: {sorted(masks) or 'none'}"
            )
        mask = declared.mask
        keys = [self.full_key(name) for name in tensors]
        values = [
            checks.stat_value(key, value, mask, mask_key)
            for key, value in zip(keys, tensors.values())
        ]
        with self._lock:
            window = produce.target(self, self._window, self.refusals, keys)
            for key in keys:  # every check before anything is recorded
                window.check_stat(key, reduce, mask.device)
            by_dtype: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
            for key, value in zip(keys, values):
                window.add_stat(key, reduce, mask.device, self._bounds.get(key, ()))
                window.set_group(key, reduce_group)
                by_dtype.setdefault(value.dtype, []).append((key, value.detach()))
            bank = window.bank(mask.device)
            for group in by_dtype.values():
                bank.fold(
                    tuple(key for key, _ in group),
                    declared,
                    [value.reshape(-1) for _, value in group],
                )
            for key, value in zip(keys, values):
                buckets = window.stats[key].buckets
                if buckets is not None:
                    buckets += accumulate.bucket_counts(value.detach(), mask, self._bounds[key])

    stat_compact = stat

    def fold_moment_rows(
        self,
        names: Sequence[str],
        rows: torch.Tensor,
        reduce_type: ReduceType | None = None,
        buckets: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        """Fold masked moments that a producer reduced itself into stats.

        For producers that derive many keys from a few per-token quantities: each row is the
        state ``stat()`` would have folded for one key, ``[sum, count, min, -max]`` (an
        empty one is ``[0, 0, inf, inf]``), its bucket counts given apart.

        Args:
            names: the keys (relative to the current scope), one per row.
            rows: float64 ``[len(names), 4]`` states ``[sum, count, min, -max]``.
            reduce_type: as for :meth:`stat`.
            buckets: the bucket counts of every key that has bucket bounds, by name.

        Raises:
            InvalidValueError: ``rows`` is not float64 of that shape, or bucket counts are
                missing, unexpected or of the wrong length, or a key was recorded
                differently before; naming the key.
        """
        reduce = checks.stat_reduce(self.full_key(next(iter(names), "?")), reduce_type)
        prefix = self.full_key("")
        keys = [f"{prefix}/{name}" if prefix else name for name in names]
        buckets = buckets or {}
        checks.moment_rows(keys, rows)
        for name, key in zip(names, keys):
            n_buckets = len(self._bounds[key]) + 1 if key in self._bounds else 0
            if n_buckets or name in buckets:
                checks.moment_buckets(key, buckets.get(name), n_buckets)
        if not keys:
            return
        with self._lock:
            window = produce.target(self, self._window, self.refusals, keys)
            for key in keys:
                window.check_stat(key, reduce, rows.device)
            for key in keys:
                window.add_stat(key, reduce, rows.device, self._bounds.get(key, ()))
            window.bank(rows.device).merge(tuple(keys), rows)
            for name, key in zip(names, keys):
                counts = window.stats[key].buckets
                if counts is not None:
                    counts += buckets[name]

    def bucket_bounds(self, name: str) -> tuple[float, ...]:
        """The bucket bounds of stat ``name`` (current scope); empty when it has none."""
        return self._bounds.get(self.full_key(name), ())

    def declared_mask(self, name: str) -> kernels.MaskBits:
        """The mask declared as denominator ``name`` in the current scope, with its count.

        Raises:
            UnknownDenominatorError: no such denominator was declared.
        """
        key = self.full_key(name)
        declared = self._masks().get(key)
        if declared is None:
            raise UnknownDenominatorError(f"unknown denominator {key!r}")
        return declared

    def scalar(self, *, reduce_group: object = None, **values: float | torch.Tensor) -> None:
        """Record single values; exported as the count-weighted mean plus ``key__count``.

        Accepts what AReaL records (it calls ``float(value)``): Python and numpy numbers,
        bools (as 0.0/1.0), 0-d arrays and one-element tensors. Every value is checked before
        any is recorded. ``reduce_group`` is AReaL's per-key override, as for :meth:`stat`.

        Raises:
            InvalidValueError: a value is not a real number (a string, None, a complex
                number) or has more than one element; naming the key.
        """
        checks.reduce_group(self.full_key(next(iter(values), "?")), reduce_group)
        keys = [self.full_key(name) for name in values]
        checked = [(key, checks.scalar_value(key, v)) for key, v in zip(keys, values.values())]
        with self._lock:
            window = produce.target(self, self._window, self.refusals, keys)
            for key, _ in checked:
                window.check_kind(key, "a scalar")
            for key, value in checked:
                window.set_group(key, reduce_group)
                state = window.scalar(key)
                if isinstance(value, torch.Tensor):
                    state.add_tensor(value)
                else:
                    state.add(value)

    def producing(self, owner: str) -> AbstractContextManager[None]:
        """Record the calls inside as producer ``owner``'s one unit: nothing if one raises,
        nothing (one warning) if another caller recorded one of its keys in this window;
        see :mod:`telemetry.record.produce`."""
        return produce.staged(self, owner, self._commit_staged)

    def _commit_staged(self, window: Window, owner: str) -> None:
        with self._lock:
            produce.merge(self._window, window, owner, self.refusals)

    def _masks(self) -> Mapping[str, kernels.MaskBits]:
        return produce.masks_of(self._window, produce.staged_window(self))

    # -- export -----------------------------------------------------------------------

    def collect(self, key: str | None = None, reset: bool = True) -> Collected:
        """This window's states (keys starting with ``key`` if given), cleared if ``reset``,
        with the per-key reduce groups of the keys that have one."""
        with self._lock:
            taken = self._window.take(key, reset)
        return Collected(taken.states(), dict(taken.groups))

    def build_points(self, reduced: Reduced) -> list[Point]:
        """Points for reduced states collected on any rank."""
        return tracker_points(reduced, self._bounds)

    def reset(self) -> None:
        """Drop everything recorded since the last export."""
        self.collect()

    def export(
        self,
        key: str | None = None,
        reduce_group: dist.ProcessGroup | None = None,
        key_sync_group: dist.ProcessGroup | None = None,
        reset: bool = True,
    ) -> Stats:
        """Reduce this tracker's keys over ``reduce_group`` and return AReaL's flat dict.

        ``reduce_group=None`` is rank-local: no collective. Otherwise every rank of the
        group must call it, and all receive the same result. Keys recorded with a per-key
        ``reduce_group`` are reduced over ``key_sync_group`` when given (every rank of it
        must export), else over their own group (every rank of it must hold them), as in
        AReaL.
        """
        return export.export_sources(
            [self], key, reduce_group, reset, key_sync_group=key_sync_group
        )
