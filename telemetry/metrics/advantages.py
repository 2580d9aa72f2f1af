"""Advantage sign fractions: ``<scope>/advantage_{positive,negative,zero}_fraction``.

Token fractions of the shaped input advantages over the batch loss mask, before
M2/rejection filtering (AReaL records them in ``ppo_actor``). They describe tokens,
not task success or gradient sign. Each is an AVG stat of a 0/1 indicator over the
denominator ``advantage_n_tokens`` (the loss-mask count, exported too), so the
fractions pool exactly across DP ranks. A NaN advantage counts in none of the three.
"""

from __future__ import annotations

import torch

from telemetry.metrics.train_infer import as_mask, as_rows, resolve_tracker, row_chunks
from telemetry.model.errors import ShapeMismatchError
from telemetry.record.tracker import DistributedStatsTracker, ReduceType


def record_advantage_fractions(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    tracker: DistributedStatsTracker | None = None,
) -> None:
    """Record ``advantage_{positive,negative,zero}_fraction`` under the current scope.

    Args:
        advantages: per-token advantages.
        loss_mask: bool or 0/1 integer mask of the same shape.
        tracker: the tracker to record into (default: the default tracker).

    Raises:
        ShapeMismatchError: shapes differ.
        MaskTypeError: ``loss_mask`` is a float tensor.
    """
    tracker = resolve_tracker(tracker)
    key = tracker.full_key("advantage_n_tokens")
    if not isinstance(advantages, torch.Tensor):
        raise ShapeMismatchError(f"{key!r}: advantages must be a tensor")
    mask = as_mask(loss_mask, key, advantages.shape)
    flat = as_rows(advantages.shape)
    adv_2d, mask_2d = advantages.detach().reshape(flat), mask.reshape(flat)
    with tracker.producing("record_advantage_stats"):
        for part in row_chunks(*flat):
            adv, valid = adv_2d[part], mask_2d[part]
            tracker.denominator(advantage_n_tokens=valid)
            tracker.stat(
                denominator="advantage_n_tokens",
                reduce_type=ReduceType.AVG,
                advantage_positive_fraction=(adv > 0).to(torch.float64),
                advantage_negative_fraction=(adv < 0).to(torch.float64),
                advantage_zero_fraction=(adv == 0).to(torch.float64),
            )
