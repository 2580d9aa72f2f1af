"""One pass over a chunk of train/infer log-probs: per-token rows and their reductions.

The finite valid tokens (both log-probs finite, mask True) are marked once: every other
token becomes NaN in the rows, so that the sums are ``nansum`` and the extremes are
``amin``/``amax`` after one ``nan_to_num`` fill, with no boolean selection (``where`` and
``masked_fill`` branch per element on the CPU). Nothing is read on the host.

Precision: every sum and extreme is that of the exact float64 values (the inputs are
widened exactly, ``d`` and the rows are float64). Only the threshold comparisons of
``d`` and ``abs(d)`` (bucket and tail counts) run in the *compare dtype*: float64 for
float64 inputs, otherwise float32 (half the memory traffic), where ``d`` and the bounds
are rounded to float32 first. A count then differs from the exact one only by tokens
whose ``d`` rounds to the same float32 as the bound (within one float32 ulp of it).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from telemetry.record.scratch import Scratch

__all__ = ["ROWS", "Reduced", "compare_dtype", "reduce_chunk"]

# Per-token float64 rows, in this order (the first three also get their minima, d its
# maximum: the maxima of abs(d) and kl_k3 follow from the extremes of d).
ROWS = ("d", "abs_d", "kl_k3", "d_squared", "k3_overflow", "trainer", "rollout")
D, ABS, K3, SQUARED, OVERFLOW, TRAINER, ROLLOUT = range(len(ROWS))
N_EXTREME_ROWS = 3
_INF = math.inf
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64}
# Rows of the comparisons' buffer that hold the filled float64 rows of the minima.
_MIN_ABOVE_ROWS = {dtype: N_EXTREME_ROWS * 8 // dtype.itemsize for dtype in _BITS}


class Reduced(NamedTuple):
    """A chunk's reductions over its finite valid tokens.

    Attributes:
        finite: bool mask of the finite valid tokens (a fresh tensor, not scratch).
        sums: float64 ``[7]``, the sums of the rows named by ``ROWS``.
        low: float64 ``[3]``, minima of d, abs(d), kl_k3 (``+inf`` with no token).
        high: float64 ``[1]``, the maximum of d (``-inf`` with no token).
        logp_low: ``[2]`` minima of the trainer and rollout log-probs (compare dtype).
        logp_high: ``[2]`` their maxima.
        above: counts (compare dtype) of d above each d threshold, then of abs(d) above
            each abs threshold.
    """

    finite: torch.Tensor
    sums: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    logp_low: torch.Tensor
    logp_high: torch.Tensor
    above: torch.Tensor


def compare_dtype(*logps: torch.Tensor) -> torch.dtype:
    """float32 when every input is float32, bfloat16 or float16 (float32 holds those
    exactly), else float64."""
    narrow = (torch.float32, torch.bfloat16, torch.float16)
    return torch.float32 if all(x.dtype in narrow for x in logps) else torch.float64


def reduce_chunk(
    trainer: torch.Tensor,
    rollout: torch.Tensor,
    valid: torch.Tensor,
    d_thresholds: torch.Tensor,
    abs_thresholds: torch.Tensor,
    scratch: Scratch,
) -> Reduced:
    """Reduce one chunk: 1-D log-probs of equal length and their bool mask.

    Args:
        trainer, rollout: the log-probs (any real dtype, any values).
        valid: the generation mask, bool, same length.
        d_thresholds: ``[k, 1]`` thresholds of d in the compare dtype.
        abs_thresholds: ``[j, 1]`` thresholds of abs(d) in the compare dtype (may be empty).
        scratch: where the per-token temporaries live (their contents are not kept).
    """
    n, dtype = trainer.numel(), d_thresholds.dtype
    n_d, n_abs = d_thresholds.shape[0], abs_thresholds.shape[0]
    marker, logps, rows, above = scratch.tensors(
        ((n,), dtype),
        ((2, n), dtype),
        ((len(ROWS), n), torch.float64),
        ((max(n_d + n_abs, _MIN_ABOVE_ROWS[dtype]), n), dtype),
    )
    # The minima are taken before the comparisons: their filled rows use the same memory.
    low_rows = above.view(-1)[: N_EXTREME_ROWS * n * 8 // dtype.itemsize].view(torch.float64)
    low_rows = low_rows.view(N_EXTREME_ROWS, n)
    above = above[: n_d + n_abs]
    # marker: +0.0 on finite valid tokens, NaN elsewhere (x - x is NaN only for inf and
    # NaN; 0 / 0 is NaN on padding). Added to both log-probs, it marks every row.
    torch.sub(trainer, trainer, out=marker)
    marker.div_(valid.view(torch.uint8))
    marker.add_(rollout).sub_(rollout)
    finite = marker.view(_BITS[dtype]).to(torch.bool).logical_not_()
    torch.add(trainer, marker, out=logps[0])
    torch.add(rollout, marker, out=logps[1])
    rows[TRAINER:].copy_(logps)
    d = torch.sub(rows[TRAINER], rows[ROLLOUT], out=rows[D])
    torch.abs(d, out=rows[ABS])
    # kl_k3 = expm1(d) - d in float64 (exp(d) - 1 loses the precision small d needs).
    torch.expm1(d, out=rows[K3])
    torch.eq(rows[K3], _INF, out=rows[OVERFLOW])
    rows[K3].sub_(d)
    torch.mul(d, d, out=rows[SQUARED])
    sums = rows.nansum(1)

    # The log-probs are finite on marked tokens: -inf there is only the fill.
    logp_high = logps.nan_to_num_(-_INF, _INF, -_INF).amax(1)
    logp_low = logps.nan_to_num_(_INF, _INF, _INF).amin(1)
    low = torch.nan_to_num(rows[:N_EXTREME_ROWS], _INF, _INF, -_INF, out=low_rows).amin(1)
    high = d.nan_to_num_(-_INF, _INF, -_INF).amax().reshape(1)

    # Every threshold at once; unmarked tokens (-inf, NaN) are above none.
    if dtype != torch.float64:
        d = logps[0].copy_(d)
    torch.gt(d, d_thresholds, out=above[:n_d])
    if n_abs:
        torch.gt(rows[ABS], abs_thresholds, out=above[n_d:])
    return Reduced(finite, sums, low, high, logp_low, logp_high, above.sum(1))
