"""Train/infer logprob diagnostics: ``<scope>/train_infer/...`` (AReaL's 训练诊断指标).

With d = log p_trainer - log p_rollout on valid generated tokens, every value is
computed in float64 (the 0/1/NaN indicators are stored in float32, where they are
exact) and recorded through the tracker's compact stats, so each key keeps O(1) state
(sum, count, min, max, buckets) per window, pooled exactly across DP ranks. Nothing
here reads a tensor value on the host. Per chunk of whole rows, the per-token rows are
computed by one function (``per_token``) and handed to the tracker as row views of
stacked blocks, which its kernel reads in place.

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
import weakref
from collections.abc import Sequence

import torch

from telemetry.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.tracker import DistributedStatsTracker, ReduceType

RATIO_THRESHOLDS = (1.5, 2.0, 3.0, 5.0, 10.0)
DEFAULT_LOGP_DIFF_BOUNDS = tuple(
    sorted({s * math.log(t) for t in RATIO_THRESHOLDS for s in (-1.0, 1.0)} | {0.0})
)
# Per-token float64 temporaries are bounded by processing at most this many tokens
# (whole rows) at once: about 2 MiB per temporary.
CHUNK_TOKENS = 1 << 18

_configured: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def resolve_tracker(tracker: DistributedStatsTracker | None) -> DistributedStatsTracker:
    """``tracker``, or the default tracker of :mod:`telemetry.stats_tracker`."""
    if tracker is not None:
        return tracker
    from telemetry import stats_tracker

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
    """
    if not isinstance(mask, torch.Tensor) or mask.is_floating_point() or mask.is_complex():
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise MaskTypeError(f"{key!r}: mask must be a bool or integer tensor, got {kind}")
    if mask.shape != shape:
        raise ShapeMismatchError(
            f"{key!r}: mask shape {tuple(mask.shape)} does not match {tuple(shape)}"
        )
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
        InvalidValueError: a logprob input is not a tensor.
    """
    tracker = resolve_tracker(tracker)
    with tracker.scope("train_infer"):
        key = tracker.full_key("")
        for name, value in (("trainer_logp", trainer_logp), ("rollout_logp", rollout_logp)):
            if not isinstance(value, torch.Tensor):
                raise InvalidValueError(
                    f"{key!r}: {name} must be a tensor, got {type(value).__name__}"
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


# Row names of the per-token blocks of a chunk, in the order they are stacked. Over
# finite tokens, float64: the first two AVG_MIN_MAX, the rest AVG (``per_token``), then
# kl_k3 and its overflow indicator (``k3_rows``: ATen's float64 ``expm1``).
DIFF_ROWS = (
    "logp_diff",
    "logp_abs_diff",
    "logp_diff_squared",
    "trainer_nll",
    "rollout_nll",
    "kl_k1",
    "kl_k2",
)
K3_ROWS = ("kl_k3", "kl_k3_overflow_fraction")
# Over valid tokens, AVG; 0/1 indicators (NaN on non-finite tokens), exact in float32:
VALID_ROWS = ("nonfinite_logp_fraction", *(f"ratio_outside_{t:g}" for t in RATIO_THRESHOLDS))


def per_token(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-token quantities of 1-D logprobs and their bool mask ``valid``, but kl_k3.

    Returns:
        The *finite* mask, the ``[7, N]`` float64 rows named by ``DIFF_ROWS`` (d first)
        and the ``[6, N]`` float32 rows named by ``VALID_ROWS``.
    """
    trainer = trainer_logp.to(torch.float64)
    rollout = rollout_logp.to(torch.float64)
    finite_both = torch.isfinite(trainer) & torch.isfinite(rollout)
    # On non-finite tokens d is replaced by 0 so that no row holds inf/NaN from d; those
    # positions are outside the *finite* mask and never reach a sum.
    d = torch.where(finite_both, trainer - rollout, 0.0)
    abs_d = d.abs()
    d2 = d.square()
    by_finite = torch.stack([d, abs_d, d2, -trainer, -rollout, -d, d2 * 0.5])
    # Tail fractions: 1[abs(d) > log t], plus NaN on non-finite tokens, so that any
    # non-finite valid token turns the pooled sum (and mean) into NaN.
    nan_where_nonfinite = torch.where(finite_both, 0.0, math.nan).to(torch.float32)
    tails = [
        (abs_d > math.log(t)).to(torch.float32) + nan_where_nonfinite for t in RATIO_THRESHOLDS
    ]
    by_valid = torch.stack([(~finite_both).to(torch.float32), *tails])
    return valid & finite_both, by_finite, by_valid


def k3_rows(d: torch.Tensor) -> torch.Tensor:
    """``[2, N]`` float64: expm1(d) - d and 1[expm1(d) = inf] (d finite, float64).

    ``expm1`` rather than ``exp(d) - 1``: the latter loses the precision kl_k3 needs
    for small d.
    """
    rows = torch.empty(2, d.numel(), dtype=torch.float64, device=d.device)
    torch.expm1(d, out=rows[0])
    torch.eq(rows[0], math.inf, out=rows[1])  # expm1 >= -1: overflow is +inf only
    rows[0].sub_(d)
    return rows


def _record_chunk(
    tracker: DistributedStatsTracker,
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    valid: torch.Tensor,
) -> None:
    trainer, rollout = trainer_logp.detach().reshape(-1), rollout_logp.detach().reshape(-1)
    valid = valid.reshape(-1)
    finite, by_finite, by_valid = per_token(trainer, rollout, valid)
    # Row views of the blocks: the tracker's fused kernel reads each block in place.
    diff = by_finite.unbind(0)
    tracker.denominator(n_valid_tokens=valid, n_finite_tokens=finite)
    tracker.stat(denominator="n_finite_tokens", **dict(zip(DIFF_ROWS[:2], diff[:2])))
    tracker.stat(
        denominator="n_finite_tokens",
        reduce_type=ReduceType.AVG,
        **dict(zip(DIFF_ROWS[2:], diff[2:])),
    )
    tracker.stat(
        denominator="n_finite_tokens",
        reduce_type=ReduceType.AVG,
        **dict(zip(K3_ROWS, k3_rows(diff[0]).unbind(0))),
    )
    tracker.stat(
        denominator="n_valid_tokens",
        reduce_type=ReduceType.AVG,
        **dict(zip(VALID_ROWS, by_valid.unbind(0))),
    )
