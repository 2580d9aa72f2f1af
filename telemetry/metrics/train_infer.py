"""Train/infer logprob diagnostics: ``<scope>/train_infer/...`` (AReaL's 训练诊断指标).

With d = log p_trainer - log p_rollout on valid generated tokens, every value is
computed in float64 and recorded through the tracker's compact stats, so each key keeps
O(1) state (sum, count, min, max, buckets) per window, pooled exactly across DP ranks.
Nothing here reads a tensor value on the host.

Per chunk of whole rows, only seven per-token rows are materialised (d, abs(d), d^2,
both logprobs, kl_k3 and its overflow indicator: ``per_token_block``) and reduced by the
tracker's kernel in one call; the other keys' states follow from those exactly (the
moments of -x and of d^2/2 from those of x and d^2; the tail fractions from bucket
counts of abs(d) and the non-finite count), and are folded in with
``DistributedStatsTracker.fold_moments``.

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

from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.record import kernels
from telemetry.record.scratch import Scratch
from telemetry.record.tracker import DistributedStatsTracker, ReduceType

RATIO_THRESHOLDS = (1.5, 2.0, 3.0, 5.0, 10.0)
RATIO_LOGS = tuple(math.log(t) for t in RATIO_THRESHOLDS)
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


# A chunk's per-token rows over *finite* tokens, float64, stacked in one block that the
# stat kernel reduces to [sum, count, min, -max] per row in one call.
BLOCK_ROWS = ("d", "abs_d", "d_squared", "trainer", "rollout", "kl_k3", "k3_overflow")
_D, _ABS, _SQUARED, _TRAINER, _ROLLOUT, _K3, _OVERFLOW = range(len(BLOCK_ROWS))
# Keys over finite tokens, each from a block row, as (row, negated, scale): the mean,
# min and max of -x are -mean, -max and -min of x; d^2/2 scales d^2.
FINITE_KEYS = {
    "logp_diff": (_D, False, 1.0),
    "logp_abs_diff": (_ABS, False, 1.0),
    "logp_diff_squared": (_SQUARED, False, 1.0),
    "trainer_nll": (_TRAINER, True, 1.0),
    "rollout_nll": (_ROLLOUT, True, 1.0),
    "kl_k1": (_D, True, 1.0),
    "kl_k2": (_SQUARED, False, 0.5),
    "kl_k3": (_K3, False, 1.0),
    "kl_k3_overflow_fraction": (_OVERFLOW, False, 1.0),
}
AVG_MIN_MAX_KEYS = ("logp_diff", "logp_abs_diff")
TAIL_KEYS = tuple(f"ratio_outside_{t:g}" for t in RATIO_THRESHOLDS)


def per_token_block(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, block: torch.Tensor
) -> torch.Tensor:
    """Fill ``block`` (``[7, N]`` float64) with the rows named by ``BLOCK_ROWS`` of 1-D
    logprobs (any values); returns it.

    Only positions where both logprobs are finite are meaningful; the stat kernel reads
    the block through the finite mask. kl_k3 uses ``expm1`` (``exp(d) - 1`` loses the
    precision small d needs); its overflow indicator is 1 where ``expm1(d)`` is +inf.
    """
    d = block[_D]
    block[_TRAINER].copy_(trainer_logp)
    block[_ROLLOUT].copy_(rollout_logp)
    torch.sub(block[_TRAINER], block[_ROLLOUT], out=d)
    torch.abs(d, out=block[_ABS])
    torch.square(d, out=block[_SQUARED])
    torch.expm1(d, out=block[_K3])
    torch.eq(block[_K3], math.inf, out=block[_OVERFLOW])  # expm1 >= -1: +inf only
    block[_K3].sub_(d)
    return block


class _KeyMap:
    """Device constants that turn the block's row states into the finite keys' states."""

    def __init__(self, device: torch.device) -> None:
        rows, negated, scales = zip(*FINITE_KEYS.values())
        self.rows = torch.tensor(rows, dtype=torch.int64, device=device)
        self.negated = torch.tensor(negated, device=device).unsqueeze(1)
        scale = torch.tensor(scales, dtype=torch.float64, device=device)
        sign = torch.where(self.negated.squeeze(1), -1.0, 1.0).to(torch.float64)
        # [sum, count, min, -max] of s*x from those of x (after swapping for s < 0).
        self.factor = torch.stack([sign * scale, torch.ones_like(scale), scale, scale], 1)
        self.tails = torch.tensor(RATIO_LOGS, dtype=torch.float64, device=device)


_key_maps: dict[torch.device, _KeyMap] = {}
# The per-token block and bucket indices of a chunk live in scratch memory per device,
# used by one chunk at a time.
_scratch: dict[torch.device, Scratch] = {}
_scratch_lock = threading.Lock()


def _finite_key_states(rows: torch.Tensor, key_map: _KeyMap) -> torch.Tensor:
    """``[len(FINITE_KEYS), 4]`` states from the block's ``[7, 4]`` row states."""
    chosen = rows.index_select(0, key_map.rows)
    swapped = chosen[:, [0, 1, 3, 2]]  # min(-x) = -max(x), -max(-x) = min(x)
    states = torch.where(key_map.negated, swapped, chosen) * key_map.factor
    empty = chosen[:, 1:2] == 0  # no finite token: the extremes stay +inf
    states[:, 2:] = torch.where(empty, math.inf, states[:, 2:])
    return states


def _counts_above(values: torch.Tensor, bounds: Sequence[float]) -> torch.Tensor:
    """float64 counts of ``values`` strictly above each bound (padding at -inf never is).

    One comparison per bound: branch-free, unlike a binary search per value
    (``bucketize``), whose speed depends on the data.
    """
    return torch.stack([torch.gt(values, bound).sum() for bound in bounds]).to(torch.float64)


def _bucket_counts(above: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Counts in the buckets ``(bounds[i-1], bounds[i]]`` of ``count`` values, from the
    counts above each bound."""
    return torch.cat([count - above[:1], above[:-1] - above[1:], above[-1:]])


def _valid_key_states(
    row_states: torch.Tensor, tails_above: torch.Tensor, n_valid: torch.Tensor, key_map: _KeyMap
) -> torch.Tensor:
    """States of ``nonfinite_logp_fraction`` and the tail fractions, over valid tokens.

    A tail indicator is 1[abs(d) > log t] on finite tokens and NaN on non-finite valid
    ones, so one non-finite valid token makes the tail sums, minima and maxima NaN.
    """
    n_finite = row_states[_ABS, 1]
    n_nonfinite = n_valid - n_finite
    any_nonfinite = n_nonfinite > 0
    low_abs, high_abs = row_states[_ABS, 2], -row_states[_ABS, 3]
    tail_low = (low_abs > key_map.tails).to(torch.float64)
    tail_high = (high_abs > key_map.tails).to(torch.float64)
    tails = torch.stack([tails_above, n_valid.expand(5), tail_low, -tail_high], 1)
    tails = torch.where(any_nonfinite, math.nan, tails)
    tails[:, 1] = n_valid
    nonfinite = torch.stack(
        [
            n_nonfinite,
            n_valid,
            (n_finite == 0).to(torch.float64),
            -any_nonfinite.to(torch.float64),
        ]
    ).unsqueeze(0)
    states = torch.cat([nonfinite, tails])
    empty = n_valid == 0
    states[:, 2:] = torch.where(empty, math.inf, states[:, 2:])
    return states


def _record_chunk(
    tracker: DistributedStatsTracker,
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    valid: torch.Tensor,
) -> None:
    trainer, rollout = trainer_logp.detach().reshape(-1), rollout_logp.detach().reshape(-1)
    valid = valid.reshape(-1)
    finite = valid & torch.isfinite(trainer) & torch.isfinite(rollout)
    tracker.denominator(n_valid_tokens=valid, n_finite_tokens=finite)
    finite_bits = tracker.declared_mask("n_finite_tokens")
    n_valid = tracker.declared_mask("n_valid_tokens").count
    device = trainer.device
    key_map = _key_maps.get(device)
    if key_map is None:
        key_map = _key_maps[device] = _KeyMap(device)
    n = trainer.numel()
    with _scratch_lock:
        scratch = _scratch.get(device)
        if scratch is None:
            scratch = _scratch[device] = Scratch(device)
        (block,) = scratch.tensors(((len(BLOCK_ROWS), n), torch.float64))
        per_token_block(trainer, rollout, block)
        empty = torch.tensor([0.0, 0.0, math.inf, math.inf], dtype=torch.float64, device=device)
        # The block is ours: the kernel leaves its valid values and -inf on padding.
        row_states = kernels.fold_block(
            empty.expand(len(BLOCK_ROWS), 4), finite_bits, block, scratch, overwrite=True
        )
        bounds = tracker.bucket_bounds("logp_diff")
        above = _counts_above(block[_D], bounds) if bounds else None
        tails_above = _counts_above(block[_ABS], RATIO_LOGS)
    states = dict(zip(FINITE_KEYS, _finite_key_states(row_states, key_map).unbind(0)))
    if above is not None:
        buckets = _bucket_counts(above, finite_bits.count)
        states["logp_diff"] = torch.cat([states["logp_diff"], buckets])
    tracker.fold_moments({key: states.pop(key) for key in AVG_MIN_MAX_KEYS})
    tracker.fold_moments(states, ReduceType.AVG)
    valid_states = _valid_key_states(row_states, tails_above, n_valid, key_map)
    tracker.fold_moments(
        dict(zip(("nonfinite_logp_fraction", *TAIL_KEYS), valid_states.unbind(0))),
        ReduceType.AVG,
    )
