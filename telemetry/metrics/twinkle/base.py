"""The Twinkle ``Metric`` base: declared sum/min/max states, one coalesced DP reduction.

A metric declares every number it needs in ``__init__`` with :meth:`Metric.add_state`
(its name and reduce op, as torchmetrics' ``add_state``; the declaration is the one every
producer makes, :class:`telemetry.record.declared.DeclaredStates`), keeps them as float64
tensor states on the device of its inputs (never a mean), and updates them with
:meth:`Metric._update`. A metric is a :class:`telemetry.record.source.StateSource`, and its
states are reduced the one way every source's are,
:func:`telemetry.record.export.reduce_sources`: ``calculate()`` reduces the states updated
in the window across its ``process_group`` (3 collectives whatever the number of states
when the ranks agree on them; none without a group), divides afterwards, and resets;
``attach()`` registers it instead, so the same states join the tracker's ``export_all``
reduction and the results come out as gauges of the same export.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import Gauge, Point
from telemetry.record.declared import DeclaredStates
from telemetry.record.export import reduce_sources
from telemetry.record.layout import Reduced, ReduceOp, State
from telemetry.record.source import Collected


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` for mappings (Twinkle's InputFeature/ModelOutput), else an attribute."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def as_tensor(value: Any, key: str, device: torch.device | None = None) -> torch.Tensor:
    """``value`` as a tensor (lists and numbers accepted), on ``device`` if given.

    Raises:
        InvalidValueError: ``value`` is missing or not convertible.
    """
    if value is None:
        raise InvalidValueError(f"{key!r}: required input is missing")
    try:
        # Python floats stay float64 (numpy's default), not torch's float32 default.
        tensor = value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InvalidValueError(f"{key!r}: expected a tensor, got {type(value).__name__}") from exc
    return tensor if device is None else tensor.to(device)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _global_rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass(frozen=True, slots=True)
class UpdateRule:
    """How an update changes a declared state (its op and size are its declaration's).

    Until its first update in a window a state holds its default, the identity of its
    op, and stays out of the reduction (a rank that never updated it has no say).
    ``replace``: each update replaces the value (the latest; ranks hold the same one, so
    ``MAX`` across ranks keeps it); otherwise updates fold in by the op. ``per_rank``:
    a replaced vector that every rank contributes to its own slot of a gathered vector.
    """

    replace: bool = False
    per_rank: bool = False


class Metric(ABC):
    """Base of Twinkle's metrics: ``accumulate`` / ``calculate`` / ``reset``.

    ``accumulate`` takes the keywords a class lists in ``keywords`` (Twinkle's names and
    the source documents' names); any other keyword raises
    :class:`~telemetry.model.errors.InvalidValueError` naming the class, the keyword and
    the accepted ones, instead of being ignored.

    Subclasses declare their states in ``__init__`` (:meth:`add_state`), implement
    ``_accumulate(inputs, outputs, **kwargs)`` with :meth:`_update` calls (tensor ops
    only, no host sync) and ``_finalize(states) -> dict[str, float]`` on the reduced host
    arrays of the states updated in the window (a state no rank updated is absent).

    Args:
        device_mesh: kept for Twinkle compatibility; unused.
        process_group: the DP group ``calculate()`` reduces over; ``None`` computes this
            process's values only (no collective).
        prefix: prepended to every output key (for example ``"eval/"``).
        name: identifies the metric's states in a tracker export (default: snake-cased
            class name); must be the same on every rank and unique per tracker.
    """

    keywords: ClassVar[tuple[str, ...]] = ()
    """The keywords ``accumulate`` accepts."""

    def __init__(
        self,
        device_mesh: Any = None,
        process_group: dist.ProcessGroup | None = None,
        *,
        prefix: str = "",
        name: str | None = None,
    ) -> None:
        self.device_mesh = device_mesh
        self.process_group = process_group
        self.prefix = prefix
        self.name = name or _snake(type(self).__name__)
        self.source_id = f"twinkle/{self.name}"
        self._states = DeclaredStates(f"twinkle/{self.name}/")
        self._rules: dict[str, UpdateRule] = {}
        self._values: dict[str, torch.Tensor] = {}  # the states updated in this window

    # -- states -----------------------------------------------------------------------------

    def add_state(
        self,
        name: str,
        reduce: ReduceOp,
        *,
        size: int | None = 1,
        replace: bool = False,
        per_rank: bool = False,
    ) -> None:
        """Declare state ``name``: its reduce op across calls and ranks, and its size.

        Args:
            name: the state's name, unique in the metric.
            reduce: how updates (unless ``replace``) and ranks combine its elements.
            size: its number of elements; ``None`` where the first update sets it.
            replace: each update replaces the value instead of folding it in.
            per_rank: a replaced vector gathered into this rank's slot (needs ``MAX``).

        Raises:
            ValueError: ``name`` is declared already, or the options do not fit.
        """
        if per_rank and (reduce is not ReduceOp.MAX or not replace):
            raise ValueError(f"{self.name}/{name}: a per-rank state is a replaced MAX state")
        if not replace and size is None:
            raise ValueError(f"{self.name}/{name}: a folded state needs a size")
        self._states.add_state(name, reduce, size=size)
        self._rules[name] = UpdateRule(replace, per_rank)

    def _update(self, name: str, value: torch.Tensor | float) -> None:
        """Fold ``value`` into state ``name`` by its reduce op, or replace it (hot path:
        tensor ops only).

        Raises:
            InvalidValueError: ``name`` was not declared, or ``value`` has the wrong size.
        """
        rule = self._rules.get(name)
        if rule is None:
            raise InvalidValueError(
                f"{self.name}/{name}: state {name!r} of {type(self).__name__} was not declared "
                f"(add_state in __init__); declared: {', '.join(sorted(self._rules)) or 'none'}"
            )
        declared = self._states[name]
        value = torch.as_tensor(value, dtype=torch.float64).detach().reshape(-1)
        if declared.size is not None and value.numel() != declared.size:
            raise InvalidValueError(
                f"{self.name}/{name}: state has {declared.size} elements, "
                f"update has {value.numel()}"
            )
        state = self._values.get(name)
        if rule.replace:
            state = value
        elif state is None:  # the identity folded with value, on value's device
            state = value.clone()
        elif declared.reduce is ReduceOp.SUM:
            state = state + value.to(state.device)
        elif declared.reduce is ReduceOp.MIN:
            state = torch.minimum(state, value.to(state.device))
        else:
            state = torch.maximum(state, value.to(state.device))
        self._values[name] = state

    def _value(self, name: str) -> torch.Tensor | None:
        """State ``name`` if updated since the last reset, else ``None`` (its default)."""
        return self._values.get(name)

    # -- public API ----------------------------------------------------------------------

    def accumulate(self, inputs: Any, outputs: Any = None, **kwargs: Any) -> None:
        """Add one micro-batch (or a list of micro-batches with a list of outputs).

        With list ``inputs`` and list ``outputs`` of the same length, each pair is
        accumulated in turn; keyword values that are lists of that length are split
        per micro-batch, other keyword values are passed to every micro-batch.

        Raises:
            InvalidValueError: a keyword not in the class's ``keywords``.
        """
        self._check_keywords(kwargs)
        if isinstance(inputs, list) and isinstance(outputs, list):
            if len(inputs) != len(outputs):
                raise InvalidValueError(
                    f"{self.name}: {len(inputs)} inputs but {len(outputs)} outputs"
                )
            n = len(inputs)
            for i, (inp, out) in enumerate(zip(inputs, outputs, strict=True)):
                per_mb = {
                    k: (v[i] if isinstance(v, list) and len(v) == n else v)
                    for k, v in kwargs.items()
                }
                self._accumulate(inp, out, **per_mb)
            return
        self._accumulate(inputs, outputs, **kwargs)

    def _check_keywords(self, kwargs: Mapping[str, Any]) -> None:
        unknown = sorted(set(kwargs) - set(self.keywords))
        if not unknown:
            return
        accepted = ", ".join(sorted(self.keywords)) if self.keywords else "none"
        plural = "s" if len(unknown) > 1 else ""
        raise InvalidValueError(
            f"{type(self).__name__}.accumulate: unknown keyword{plural} "
            f"{', '.join(repr(k) for k in unknown)}; accepted: {accepted}"
        )

    def calculate(self) -> dict[str, float]:
        """Reduce over ``process_group`` (collective when set), compute floats, reset.

        The states go through the export's reduction without the straggler views (with a
        group, 3 collectives when the ranks agree on the keys; none without). A window
        that no rank updated gives what ``_finalize`` gives for no states; if the
        reduction raises, the window is kept.
        """
        reduced = reduce_sources([self], self.process_group, reset=False, rank_spreads=False)
        result = self._finalize(self._states.values(reduced.of(0)))
        self.reset()
        return result

    def reset(self) -> None:
        """Forget everything accumulated since the last ``calculate``/export: every
        declared state is back to its default."""
        self._values.clear()

    def attach(self, tracker: Any = None) -> Metric:
        """Register with ``tracker`` (default tracker if ``None``): joins ``export_all``."""
        if tracker is None:
            from telemetry.record import stats_tracker as tracker
        tracker.register_source(self)
        return self

    # -- StateSource protocol --------------------------------------------------------------

    def collect(self, key: str | None = None, reset: bool = True) -> Collected:
        """States under ``twinkle/<name>/<state>`` for the tracker's coalesced reduction;
        ``reset`` starts a new window. ``key`` is a tracker's filter: ignored."""
        states = self._collect()
        if reset:
            self.reset()
        return Collected(states)

    def build_points(self, reduced: Reduced) -> list[Point]:
        """One gauge per output key (``prefix + key``), from the reduced states."""
        finalized = self._finalize(self._states.values(reduced))
        return [Gauge(self.prefix + k, float(v)) for k, v in finalized.items()]

    def _collect(self) -> dict[str, State]:
        self._on_collect()
        values: dict[str, torch.Tensor] = {}
        rank, world = _global_rank_world()
        for name, tensor in self._values.items():
            if self._rules[name].per_rank:
                n = tensor.numel()
                full = torch.full((n * world,), -np.inf, dtype=torch.float64, device=tensor.device)
                full[rank * n : (rank + 1) * n] = tensor
                tensor = full
            values[name] = tensor
        return self._states.states(values)

    # -- subclass hooks ------------------------------------------------------------------------

    @abstractmethod
    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        """Update the states from one micro-batch."""

    def _on_collect(self) -> None:  # noqa: B027 (optional hook, no-op by default)
        """Add host-side states just before collection (the window closes here)."""

    @abstractmethod
    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        """Output values from the reduced states (keys without ``prefix``)."""


def scalar(states: Mapping[str, np.ndarray], name: str) -> float | None:
    """The reduced scalar state ``name``, or ``None`` if no rank recorded it."""
    value = states.get(name)
    return None if value is None else float(value[0])


def ratio(states: Mapping[str, np.ndarray], num: str, den: str) -> float | None:
    """``num / den`` of two reduced sums; ``None`` when ``den`` is missing or zero."""
    n, d = scalar(states, num), scalar(states, den)
    if n is None or d is None or d <= 0:
        return None
    return n / d


def put(out: dict[str, float], key: str, value: float | None) -> None:
    """Set ``out[key]`` unless ``value`` is ``None`` (outputs without data are omitted)."""
    if value is not None:
        out[key] = float(value)
