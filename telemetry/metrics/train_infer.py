"""Train/infer logprob diagnostics: ``<scope>/train_infer/...`` (AReaL's 训练诊断指标).

With d = log p_trainer - log p_rollout on valid generated tokens, each key keeps O(1)
state (sum, count, min, max, buckets) per window in the tracker's compact stats, pooled
exactly across DP ranks. Nothing here reads a tensor value on the host.

Per chunk of whole rows, one pass (:mod:`telemetry.metrics.logp_pass`) builds seven
float64 per-token rows (d, abs(d), kl_k3, d^2, the overflow indicator, both logprobs)
with every non-finite or padded token marked NaN, and reduces them to a few dozen
numbers: sums, extremes, and counts of d above each bucket bound and tail threshold.
Every key's state follows from those (:mod:`telemetry.metrics.train_infer_states`) and
is folded in with ``DistributedStatsTracker.fold_moment_rows``. Sums and extremes are those
of the exact float64 values; for float32, bfloat16 and float16 inputs the bucket and
tail *comparisons* use d rounded to float32, so a token within one float32 ulp of a
bound may count on either side of it (float64 inputs compare exactly).

Token sets: *valid* = the generation mask; *finite* = valid tokens where both
logprobs are finite. ``n_valid_tokens`` and ``n_finite_tokens`` are their counts.

========================== ============================================ ===========
key                        value (token-weighted mean unless noted)     tokens
========================== ============================================ ===========
logp_diff/{avg,min,max}    d (histogram buckets: ``logp_diff_bounds``)  finite
logp_abs_diff/{avg,...}    abs(d)                                       finite
logp_diff_squared          d^2                                          finite
trainer_nll, rollout_nll   -log p_trainer, -log p_rollout               finite
kl_k1, kl_k2, kl_k3        -d, d^2/2, expm1(d) - d (float64)            finite
kl_k3_overflow_fraction    1[expm1(d) = inf]                            finite
ratio_outside_{t}          1[abs(d) > log t], t in 1.5, 2, 3, 5, 10;    valid
                           NaN when any valid token is non-finite
nonfinite_logp_fraction    1[either logprob is NaN or +-inf]            valid
========================== ============================================ ===========
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Sequence

import torch

from telemetry.metrics.logp_pass import compare_dtype, reduce_chunk
from telemetry.metrics.train_infer_states import (
    AVG_KEYS,
    AVG_MIN_MAX_KEYS,
    TAIL_THRESHOLDS,
    StateMap,
)
from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.record.scratch import Scratch
from telemetry.record.tracker import DistributedStatsTracker, ReduceType

DEFAULT_LOGP_DIFF_BOUNDS = tuple(
    sorted({s * math.log(t) for t in TAIL_THRESHOLDS for s in (-1.0, 1.0)} | {0.0})
)
# Per-token float64 temporaries are bounded by processing at most this many tokens
# (whole rows) at once: about 2 MiB per temporary.
CHUNK_TOKENS = 1 << 18

_configured: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def resolve_tracker(tracker: DistributedStatsTracker | None) -> DistributedStatsTracker:
    """``tracker``, or the default tracker of :mod:`telemetry.record.stats_tracker`."""
    if tracker is not None:
        return tracker
    from telemetry.record import stats_tracker

    return stats_tracker.DEFAULT_TRACKER


def ensure_bounds(
    tracker: DistributedStatsTracker, name: str, bounds: Sequence[float] | None
) -> None:
    """Set bucket bounds of ``name`` (current scope) once per tracker and key."""
    if bounds is None:
        return
    values = tuple(float(b) for b in bounds)
    seen = _configured.setdefault(tracker, {})
    key = tracker.full_key(name)
    if seen.get(key) != values:
        tracker.set_bucket_bounds(name, values)
        seen[key] = values


def as_mask(mask: torch.Tensor, key: str, shape: torch.Size) -> torch.Tensor:
    """A boolean mask of ``shape`` (integer 0/1 masks are accepted).

    Raises:
        MaskTypeError: ``mask`` is not a bool or integer tensor.
        ShapeMismatchError: its shape differs from ``shape``.
        InvalidValueError: it holds no element (as the tracker refuses an empty mask).
    """
    if not isinstance(mask, torch.Tensor) or mask.is_floating_point() or mask.is_complex():
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise MaskTypeError(f"{key!r}: mask must be a bool or integer tensor, got {kind}")
    if mask.shape != shape:
        raise ShapeMismatchError(
            f"{key!r}: mask shape {tuple(mask.shape)} does not match {tuple(shape)}"
        )
    if mask.numel() == 0:
        raise InvalidValueError(f"{key!r}: empty mask {tuple(mask.shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def as_rows(shape: torch.Size) -> tuple[int, int]:
    """``shape`` viewed as ``(rows, tokens per row)``; 0-d and 1-d inputs are one row."""
    if len(shape) < 2:
        return 1, math.prod(shape)
    return shape[0], math.prod(shape[1:])


def row_chunks(n_rows: int, row_len: int) -> list[slice]:
    """Slices of whole rows holding at most ``CHUNK_TOKENS`` tokens each (at least one row)."""
    step = max(1, CHUNK_TOKENS // max(1, row_len))
    return [slice(i, min(i + step, n_rows)) for i in range(0, max(n_rows, 1), step)]


def record_train_infer(
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    tracker: DistributedStatsTracker | None = None,
    logp_diff_bounds: Sequence[float] | None = DEFAULT_LOGP_DIFF_BOUNDS,
) -> None:
    """Record the train/infer diagnostics under ``<current scope>/train_infer/``.

    Args:
        trainer_logp: log-probs of the sampled tokens recomputed by the trainer.
        rollout_logp: log-probs returned by the inference engine, same shape.
        mask: generation mask (bool or 0/1 integers) before rejection/advantage masking.
        tracker: the tracker to record into (default: the default tracker).
        logp_diff_bounds: histogram bucket bounds of ``logp_diff`` (``None``: none).

    Raises:
        ShapeMismatchError: the three tensors differ in shape.
        MaskTypeError: ``mask`` is a float tensor.
        InvalidValueError: a logprob input is not a tensor of real numbers.
    """
    tracker = resolve_tracker(tracker)
    with tracker.producing("record_train_infer"), tracker.scope("train_infer"):
        key = tracker.full_key("")
        for name, value in (("trainer_logp", trainer_logp), ("rollout_logp", rollout_logp)):
            if not isinstance(value, torch.Tensor):
                raise InvalidValueError(
                    f"{key!r}: {name} must be a tensor, got {type(value).__name__}"
                )
            if value.dtype == torch.bool or value.is_complex():
                raise InvalidValueError(
                    f"{key!r}: {name} must hold real numbers, not {value.dtype}"
                )
        if trainer_logp.shape != rollout_logp.shape:
            raise ShapeMismatchError(
                f"{key!r}: trainer_logp shape {tuple(trainer_logp.shape)} does not match "
                f"rollout_logp shape {tuple(rollout_logp.shape)}"
            )
        valid = as_mask(mask, tracker.full_key("mask"), trainer_logp.shape)
        ensure_bounds(tracker, "logp_diff", logp_diff_bounds)
        flat = as_rows(trainer_logp.shape)
        trainer_2d, rollout_2d = trainer_logp.reshape(flat), rollout_logp.reshape(flat)
        valid_2d = valid.reshape(flat)
        for part in row_chunks(*flat):
            _record_chunk(tracker, trainer_2d[part], rollout_2d[part], valid_2d[part])


# One StateMap per (device, compare dtype, bounds); one scratch buffer per device, used
# by one chunk at a time.
_state_maps: dict[tuple[torch.device, torch.dtype, tuple[float, ...]], StateMap] = {}
_scratch: dict[torch.device, Scratch] = {}
_scratch_lock = threading.Lock()


def _record_chunk(
    tracker: DistributedStatsTracker,
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    valid: torch.Tensor,
) -> None:
    trainer, rollout = trainer_logp.detach().reshape(-1), rollout_logp.detach().reshape(-1)
    valid = valid.reshape(-1)
    device, dtype = trainer.device, compare_dtype(trainer, rollout)
    bounds = tracker.bucket_bounds("logp_diff")
    state_map = _state_maps.get((device, dtype, bounds))
    if state_map is None:
        state_map = _state_maps[device, dtype, bounds] = StateMap(bounds, dtype, device)
    # Inference mode skips autograd's bookkeeping on every op (what it makes is read-only
    # outside, which the tracker only reads).
    with _scratch_lock, torch.inference_mode():
        scratch = _scratch.get(device)
        if scratch is None:
            scratch = _scratch[device] = Scratch(device)
        reduced = reduce_chunk(
            trainer, rollout, valid, state_map.d_thresholds, state_map.abs_thresholds, scratch
        )
    tracker.denominator(n_valid_tokens=valid, n_finite_tokens=reduced.finite)
    with torch.inference_mode():
        rows, buckets = state_map.states(
            reduced,
            tracker.declared_mask("n_finite_tokens").count,
            tracker.declared_mask("n_valid_tokens").count,
        )
    n = len(AVG_MIN_MAX_KEYS)
    by_name = {"logp_diff": buckets} if buckets.numel() else None
    tracker.fold_moment_rows(AVG_MIN_MAX_KEYS, rows[:n], buckets=by_name)
    tracker.fold_moment_rows(AVG_KEYS, rows[n:], ReduceType.AVG)
