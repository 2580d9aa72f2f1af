"""Training throughput (``train_perf`` scope): tokens, seconds and estimated FLOPs.

Wrap each ``train_batch`` call (gradient zeroing, micro-batch preparation, forward,
backward, optimizer step; not rollout, reference/eval forwards, data loading,
checkpointing or the stats export) in :meth:`TrainPerf.measure`. On CUDA the span is
timed with events recorded on the current (training) stream; the events are read at
export with one synchronisation per stream, never per batch. Elsewhere it is wall time.

At export (a :class:`~telemetry.record.source.StateSource` joining ``export_all``'s single
reduction with one declared state, :mod:`telemetry.record.declared`; pass the DP group
as ``reduce_group``) tokens and FLOPs are summed over ranks and seconds take the max over
ranks, both for the window and for the totals since construction (``total_seconds`` is
the max over ranks of each rank's own total).

Keys: gauges ``train_perf/{tokens, seconds, tokens_per_second, estimated_flops,
estimated_flops_per_second, cumulative_tokens_per_second,
cumulative_estimated_flops_per_second}``; counters ``train_perf/{total_tokens,
total_seconds, total_estimated_flops}``; with ``peak_flops_per_device`` the gauges
``train_perf/{mfu, cumulative_mfu}`` = estimated FLOPs / (seconds * peak * devices).
FLOPs keys are omitted without an estimator; nothing is exported for a window in which
no rank ran a batch.
"""

from __future__ import annotations

import functools
import numbers
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import torch

from telemetry.metrics.flops import FlopsEstimator, estimate_batch_flops
from telemetry.metrics.peak_flops import device_peak_flops
from telemetry.model.errors import ConfigError, InvalidValueError, MaskTypeError
from telemetry.model.snapshot import Counter, Gauge, Point
from telemetry.record.declared import DeclaredStates
from telemetry.record.export import register_source, unregister_source
from telemetry.record.layout import PerRank, Reduced, ReduceOp
from telemetry.record.source import Collected

F = TypeVar("F", bound=Callable[..., Any])

STATE_KEY = "train_perf"
_S, _M = ReduceOp.SUM, ReduceOp.MAX
# batches, tokens, flops, seconds | total tokens, total flops, total seconds | ranks
# Per rank, for the straggler view: its tokens and seconds, where it ran a batch.
_PER_RANK = (PerRank("tokens", 1, present=0), PerRank("seconds", 3, present=0, unit="s"))
_OPS = (_S, _S, _S, _M, _S, _S, _M, _S)


class EventTiming(Protocol):
    """What :meth:`TrainPerf.measure` times batches with: ``torch.cuda`` or a stand-in."""

    def current_stream(self) -> Any:
        """The stream the batch's work runs on."""

    def Event(self, enable_timing: bool = False) -> Any:
        """An event with ``record(stream)``, ``synchronize()``, ``elapsed_time(end)`` in ms."""


class TrainPerf:
    """Accumulates training tokens, time and estimated FLOPs between exports.

    Args:
        flops_estimator: ``estimate(sequence_length) -> training FLOPs`` (see
            :func:`telemetry.metrics.flops.get_flops_estimator`), or None: no FLOPs keys.
        peak_flops_per_device: peak FLOP/s of one device (e.g. 989.5e12 for dense BF16 on
            an H100 SXM); enables ``mfu`` and ``cumulative_mfu``. Default: the device's
            dense BF16 peak from :mod:`telemetry.metrics.peak_flops`; an unknown device
            gives no MFU (one INFO line).
        num_devices: devices doing the training work, for MFU; default: the number of
            ranks in the reduction (right for pure data parallelism; multiply by the
            TP*PP*CP size otherwise).
        device: where batches run; default CUDA when available, else CPU (wall time).
        events: times the batches with events instead of wall time; default ``torch.cuda``
            on a CUDA device (tests pass a stand-in whose events report milliseconds).
        register: join ``stats_tracker.export_all`` (undo with :meth:`close`).

    Raises:
        ConfigError: ``peak_flops_per_device`` or ``num_devices`` is not positive.
    """

    source_id = "train_perf"

    def __init__(
        self,
        flops_estimator: FlopsEstimator | None = None,
        *,
        peak_flops_per_device: float | None = None,
        num_devices: int | None = None,
        device: torch.device | str | None = None,
        events: EventTiming | None = None,
        register: bool = True,
    ) -> None:
        if peak_flops_per_device is not None and not peak_flops_per_device > 0:
            raise ConfigError(
                f"train_perf: peak_flops_per_device must be > 0, got {peak_flops_per_device!r}"
            )
        if num_devices is not None and (
            isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1
        ):
            raise ConfigError(
                f"train_perf: num_devices must be a positive int, got {num_devices!r}"
            )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if peak_flops_per_device is None and flops_estimator is not None:
            peak_flops_per_device = device_peak_flops(device)
        self._estimator = flops_estimator
        self._peak = peak_flops_per_device
        self._num_devices = num_devices
        if events is None and torch.device(device).type == "cuda":
            events = torch.cuda
        self._timing = events
        self.start_time_unix_nano = time.time_ns()
        # window, resolved on the host
        self._batches = 0
        self._tokens = 0
        self._flops = 0.0
        self._seconds = 0.0
        # window, pending on devices until export
        self._device_tokens: dict[torch.device, torch.Tensor] = {}
        self._device_lengths: list[torch.Tensor] = []
        self._events: list[tuple[Any, Any, Any]] = []
        # totals of previous windows on this rank
        self._total_tokens = 0
        self._total_flops = 0.0
        self._total_seconds = 0.0
        self._states = DeclaredStates()
        self._states.add_state(STATE_KEY, _OPS, per_rank=_PER_RANK)
        if register:
            register_source(self)

    @contextmanager
    def measure(
        self,
        attention_mask: torch.Tensor | None = None,
        *,
        seq_lens: Sequence[int] | torch.Tensor | None = None,
    ) -> Iterator[None]:
        """Time one ``train_batch`` and count its valid tokens (no host sync).

        Args:
            attention_mask: ``[batch, length]`` (or ``[length]``) bool/integer 0-1 mask of
                the original batch; valid tokens are its sum, sequence lengths its row sums.
            seq_lens: alternatively the valid length of each (packed) sequence.

        Raises:
            InvalidValueError: neither or both inputs given, or bad lengths.
            MaskTypeError: the mask is not a bool or integer tensor.
        """
        add = self._batch_counter(attention_mask, seq_lens)
        if self._timing is not None:
            stream = self._timing.current_stream()
            start = self._timing.Event(enable_timing=True)
            start.record(stream)
            yield
            end = self._timing.Event(enable_timing=True)
            end.record(stream)
            self._events.append((stream, start, end))
        else:
            begin = time.perf_counter()
            yield
            self._seconds += time.perf_counter() - begin
        add()  # a batch that raised is not counted
        self._batches += 1

    def decorate(self, inputs: Callable[..., Mapping[str, Any]]) -> Callable[[F], F]:
        """Decorator form of :meth:`measure`.

        Args:
            inputs: called with the wrapped function's arguments; returns
                :meth:`measure`'s keyword arguments, e.g.
                ``lambda batch, *a, **k: {"attention_mask": batch["attention_mask"]}``.
        """

        def wrap(fn: F) -> F:
            @functools.wraps(fn)
            def timed(*args: Any, **kwargs: Any) -> Any:
                with self.measure(**inputs(*args, **kwargs)):
                    return fn(*args, **kwargs)

            return timed  # type: ignore[return-value]

        return wrap

    def _batch_counter(self, mask: torch.Tensor | None, seq_lens: Any) -> Callable[[], None]:
        if (mask is None) == (seq_lens is None):
            raise InvalidValueError("train_perf: give exactly one of attention_mask and seq_lens")
        if mask is not None:
            if (
                not isinstance(mask, torch.Tensor)
                or mask.dtype.is_floating_point
                or mask.is_complex()
            ):
                raise MaskTypeError(
                    f"train_perf/tokens: attention_mask must be a bool or integer tensor, "
                    f"got {getattr(mask, 'dtype', type(mask).__name__)}"
                )
            if mask.dim() == 0:
                raise InvalidValueError("train_perf/tokens: attention_mask must have a length dim")
            lengths = mask.reshape(-1, mask.shape[-1]).sum(-1, dtype=torch.int64)

            def add_mask() -> None:
                tokens = self._device_tokens.get(lengths.device)
                total = lengths.sum()
                self._device_tokens[lengths.device] = total if tokens is None else tokens + total
                if self._estimator is not None:
                    self._device_lengths.append(lengths)

            return add_mask
        if isinstance(seq_lens, torch.Tensor):
            seq_lens = seq_lens.tolist()
        lens = list(seq_lens)
        bad = [n for n in lens if isinstance(n, bool) or not isinstance(n, numbers.Integral)]
        if bad or any(n < 0 for n in lens):
            raise InvalidValueError(
                f"train_perf/tokens: sequence lengths must be non-negative ints, got {lens}"
            )
        lens = [int(n) for n in lens]
        flops = estimate_batch_flops(self._estimator, lens) if self._estimator else 0.0

        def add_lens() -> None:
            self._tokens += sum(lens)
            self._flops += flops

        return add_lens

    def _resolve(self) -> None:
        """Move the window's device-side values to the host (one sync per stream)."""
        if self._events:
            last: dict[Any, Any] = {}
            for stream, _, end in self._events:
                last[stream] = end
            for end in last.values():
                end.synchronize()
            self._seconds += sum(s.elapsed_time(e) for _, s, e in self._events) / 1000.0
            self._events.clear()
        for device, tokens in list(self._device_tokens.items()):
            self._tokens += int(tokens.item())
            del self._device_tokens[device]
        if self._device_lengths:
            lengths = torch.cat([t.cpu() for t in self._device_lengths]).tolist()
            self._flops += estimate_batch_flops(self._estimator, lengths)
            self._device_lengths.clear()

    # -- StateSource -------------------------------------------------------------------

    def collect(self, key: str | None = None, reset: bool = True) -> Collected:
        """This rank's window and totals as one state (tokens/FLOPs sum, seconds max);
        ``reset`` closes the window. ``key`` is a tracker's filter: ignored."""
        self._resolve()
        values = [
            self._batches,
            self._tokens,
            self._flops,
            self._seconds,
            self._total_tokens + self._tokens,
            self._total_flops + self._flops,
            self._total_seconds + self._seconds,
            1,
        ]
        state = torch.tensor(values, dtype=torch.float64)
        if reset:
            self.reset()
        return Collected(self._states.states({STATE_KEY: state}))

    def build_points(self, reduced: Reduced) -> list[Point]:
        """Points of one reduced export; empty when no rank ran a batch in the window."""
        state = self._states.values(reduced).get(STATE_KEY)
        if state is None or state[0] <= 0:
            return []
        _, tokens, flops, seconds, total_tokens, total_flops, total_seconds, ranks = (
            float(v) for v in state
        )
        start = self.start_time_unix_nano
        points: list[Point] = [
            Gauge("train_perf/tokens", tokens, unit="{token}"),
            Gauge("train_perf/seconds", seconds, unit="s"),
            Counter("train_perf/total_tokens", total_tokens, "{token}", start_time_unix_nano=start),
            Counter("train_perf/total_seconds", total_seconds, "s", start_time_unix_nano=start),
        ]
        points += _rates("tokens_per_second", "cumulative_tokens_per_second", "{token}/s",
                         (tokens, seconds), (total_tokens, total_seconds))  # fmt: skip
        if self._estimator is None:
            return points
        points.append(Gauge("train_perf/estimated_flops", flops, unit="{flop}"))
        points.append(
            Counter(
                "train_perf/total_estimated_flops",
                total_flops,
                "{flop}",
                start_time_unix_nano=start,
            )
        )
        points += _rates("estimated_flops_per_second", "cumulative_estimated_flops_per_second",
                         "{flop}/s", (flops, seconds), (total_flops, total_seconds))  # fmt: skip
        if self._peak is not None:
            capacity = self._peak * (self._num_devices or ranks)
            points += _rates("mfu", "cumulative_mfu", "1", (flops, seconds * capacity),
                             (total_flops, total_seconds * capacity))  # fmt: skip
        return points

    def reset(self) -> None:
        """Close the window: its values move into this rank's totals."""
        self._resolve()
        self._total_tokens += self._tokens
        self._total_flops += self._flops
        self._total_seconds += self._seconds
        self._batches, self._tokens, self._flops, self._seconds = 0, 0, 0.0, 0.0

    def close(self) -> None:
        """Stop joining ``export_all`` (idempotent)."""
        unregister_source(self)


def _rates(window: str, cumulative: str, unit: str, *pairs: tuple[float, float]) -> list[Gauge]:
    out = []
    for name, (numerator, seconds) in zip((window, cumulative), pairs):
        if seconds > 0:
            out.append(Gauge(f"train_perf/{name}", numerator / seconds, unit=unit))
    return out
