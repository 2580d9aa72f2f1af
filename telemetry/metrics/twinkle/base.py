"""The Twinkle ``Metric`` base: declared sum/min/max states, one coalesced DP reduction.

A metric keeps every number it needs as float64 tensor states on the device of its
inputs, each with its reduce op (sum, min or max), never a mean and never a string.
``calculate()`` reduces all states of the metric across its ``process_group`` with
:func:`telemetry.record.reduce.reduce_states` (2 collectives whatever the number of states),
divides afterwards, and resets. ``attach()`` registers the metric as a
:class:`telemetry.record.source.StateSource`, so the same states join the tracker's
``export_all`` reduction and the results come out as gauges of the same export.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import Gauge, Point
from telemetry.record.reduce import ReduceOp, State, StateLayout, reduce_states


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


class Metric(ABC):
    """Base of Twinkle's metrics: ``accumulate`` / ``calculate`` / ``reset``.

    ``accumulate`` takes the keywords a class lists in ``keywords`` (Twinkle's names and
    the source documents' names); any other keyword raises
    :class:`~telemetry.model.errors.InvalidValueError` naming the class, the keyword and
    the accepted ones, instead of being ignored.

    Subclasses implement ``_accumulate(inputs, outputs, **kwargs)`` with the
    ``_sum``/``_min``/``_max``/``_slots`` state updates (tensor ops only, no host sync)
    and ``_finalize(states) -> dict[str, float]`` on the reduced host arrays.

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
        self._states: dict[str, tuple[StateLayout, torch.Tensor]] = {}
        self._slotted: set[str] = set()

    # -- state updates (hot path: tensor ops only) -------------------------------------

    def _update(self, name: str, op: ReduceOp, value: torch.Tensor) -> None:
        value = value.detach().to(torch.float64).reshape(-1)
        held = self._states.get(name)
        if held is None:
            self._states[name] = (StateLayout("twinkle", (op,) * value.numel()), value.clone())
            return
        layout, state = held
        if layout.ops[0] is not op or state.numel() != value.numel():
            raise InvalidValueError(f"{self.name}/{name}: state changed layout between calls")
        value = value.to(state.device)
        if op is ReduceOp.SUM:
            state = state + value
        elif op is ReduceOp.MIN:
            state = torch.minimum(state, value)
        else:
            state = torch.maximum(state, value)
        self._states[name] = (layout, state)

    def _sum(self, name: str, value: torch.Tensor | float) -> None:
        self._update(name, ReduceOp.SUM, torch.as_tensor(value, dtype=torch.float64))

    def _min(self, name: str, value: torch.Tensor | float) -> None:
        self._update(name, ReduceOp.MIN, torch.as_tensor(value, dtype=torch.float64))

    def _max(self, name: str, value: torch.Tensor | float) -> None:
        self._update(name, ReduceOp.MAX, torch.as_tensor(value, dtype=torch.float64))

    def _last(self, name: str, value: torch.Tensor | float) -> None:
        """Replace a state with the latest value (max across ranks: identical values)."""
        value = torch.as_tensor(value, dtype=torch.float64).detach().reshape(-1)
        self._states[name] = (StateLayout("twinkle", (ReduceOp.MAX,) * value.numel()), value)

    def _slots(self, name: str, value: torch.Tensor) -> None:
        """Replace a per-rank vector; it is gathered into this rank's slot (others -inf)."""
        self._slotted.add(name)
        value = value.detach().to(torch.float64).reshape(-1)
        self._states[name] = (StateLayout("twinkle", (ReduceOp.MAX,) * value.numel()), value)

    def _held(self, name: str) -> torch.Tensor | None:
        held = self._states.get(name)
        return None if held is None else held[1]

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
        """Reduce over ``process_group`` (collective when set), compute floats, reset."""
        states = self._collect(prefix="")
        if self.process_group is None:
            reduced = {
                k: t.detach().cpu().numpy().astype(np.float64) for k, (_, t) in states.items()
            }
        else:
            reduced = reduce_states(states, self.process_group)
        result = self._finalize(reduced)
        self.reset()
        return result

    def reset(self) -> None:
        """Forget everything accumulated since the last ``calculate``/export."""
        self._states.clear()
        self._slotted.clear()

    def attach(self, tracker: Any = None) -> Metric:
        """Register with ``tracker`` (default tracker if ``None``): joins ``export_all``."""
        if tracker is None:
            from telemetry import stats_tracker as tracker
        tracker.register_source(self)
        return self

    # -- StateSource protocol --------------------------------------------------------------

    def collect_states(self) -> dict[str, State]:
        """States under ``twinkle/<name>/<state>`` for the tracker's coalesced reduction."""
        return self._collect(prefix=f"twinkle/{self.name}/")

    def build_points(self, reduced: Mapping[str, np.ndarray]) -> list[Point]:
        """One gauge per output key (``prefix + key``), from the reduced states."""
        head = f"twinkle/{self.name}/"
        mine = {k[len(head) :]: v for k, v in reduced.items() if k.startswith(head)}
        return [Gauge(self.prefix + k, float(v)) for k, v in self._finalize(mine).items()]

    def _collect(self, prefix: str) -> dict[str, State]:
        self._on_collect()
        out: dict[str, State] = {}
        rank, world = _global_rank_world()
        for name, (layout, tensor) in self._states.items():
            if name in self._slotted:
                n = tensor.numel()
                full = torch.full((n * world,), -np.inf, dtype=torch.float64, device=tensor.device)
                full[rank * n : (rank + 1) * n] = tensor
                layout, tensor = StateLayout("twinkle", (ReduceOp.MAX,) * (n * world)), full
            out[prefix + name] = (layout, tensor)
        return out

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
