"""Rollout version staleness: ``<scope>/version_stats/...`` (AReaL's checkpoint-age stats).

Qualifying tokens: valid generated tokens (``mask``) whose behavior version is >= 0. For
those, staleness_theta = current_version - behavior_version and staleness_proximal =
proximal_version - behavior_version (``proximal_version`` defaults to ``current_version``:
actor and rollout advance their published checkpoint version together after each PPO
update, so both compatible groups use it).

==================================================== =====================================
key (under ``version_stats/``)                       value
==================================================== =====================================
``n_valid_tokens``                                   ``mask`` token count, any version (a
                                                     sum; AReaL's denominator)
``n_valid_generated_tokens``                         qualifying token count (a sum; repeats
                                                     when an update reuses a trajectory)
``sample_staleness_{theta,proximal}_avg``            token-weighted mean staleness
``sample_staleness_{theta,proximal}_{min,max}``      global extrema over the reduce group
``stale_token_fraction``                             fraction with behavior < current
``future_token_fraction``                            fraction with behavior > current
``v_theta``, ``v_proximal``                          current and proximal version
                                                     (token-weighted mean)
==================================================== =====================================

Everything but the two counts is omitted when no token qualifies. The ``_avg`` stats carry
histogram buckets (``staleness_bounds``) for distributions and heatmaps.

AReaL 1.0.4 publishes the same names from one ``scalar()`` per loss micro-batch, so its
values are means over micro-batches: of per-call means (``_avg``), of per-call extrema
(``_min``/``_max``) and of per-call counts (``n_valid_generated_tokens``), with
proximal = current - 1. The source documents define token-weighted means, global extrema,
a summed count and proximal = current, as here; pass ``proximal_version=current_version - 1``
for 1.0.4's proximal convention (docs/producers.md, tests/conformance/cases_version.py).
The keys are AReaL's names, so with AReaL's own function in the same scope this producer
records nothing (one warning; :mod:`telemetry.record.produce`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from telemetry.metrics.train_infer import (
    as_mask,
    as_rows,
    ensure_bounds,
    resolve_tracker,
    row_chunks,
)
from telemetry.model.errors import InvalidValueError, ShapeMismatchError
from telemetry.record.tracker import DistributedStatsTracker, ReduceType

DEFAULT_STALENESS_BOUNDS = (-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0)


def record_version_stats(
    behavior_versions: torch.Tensor,
    current_version: int | float,
    mask: torch.Tensor,
    proximal_version: int | float | torch.Tensor | None = None,
    tracker: DistributedStatsTracker | None = None,
    staleness_bounds: Sequence[float] | None = DEFAULT_STALENESS_BOUNDS,
) -> None:
    """Record staleness of the behavior policy versions under ``<scope>/version_stats/``.

    The caller aligns ``behavior_versions`` with ``mask`` at the predicted-token
    positions: AReaL's left shift of the raw rollout versions happens before this call.
    Call once per ``_ppo_update`` (not per minibatch forward).

    Args:
        behavior_versions: per-token checkpoint version that generated each token
            (negative = unknown, excluded).
        current_version: the latest published checkpoint version.
        mask: bool or 0/1 integer generation mask, before rejection filtering.
        proximal_version: version of the proximal policy (number or per-token tensor);
            defaults to ``current_version``.
        tracker: the tracker to record into (default: the default tracker).
        staleness_bounds: histogram bucket bounds of the ``_avg`` stats (``None``: none).

    Raises:
        ShapeMismatchError: shapes differ.
        MaskTypeError: ``mask`` is a float tensor.
        InvalidValueError: ``current_version`` is not a finite number.
    """
    tracker = resolve_tracker(tracker)
    with tracker.producing("record_version_stats"), tracker.scope("version_stats"):
        key = tracker.full_key("")
        if (
            isinstance(current_version, bool)
            or not isinstance(current_version, (int, float))
            or not math.isfinite(current_version)
        ):
            raise InvalidValueError(
                f"{key!r}: current_version must be a finite number, got {current_version!r}"
            )
        if not isinstance(behavior_versions, torch.Tensor):
            raise ShapeMismatchError(f"{key!r}: behavior_versions must be a tensor")
        shape = behavior_versions.shape
        valid_mask = as_mask(mask, tracker.full_key("mask"), shape)
        proximal = _proximal(proximal_version, current_version, behavior_versions, key)
        for name in ("sample_staleness_theta_avg", "sample_staleness_proximal_avg"):
            ensure_bounds(tracker, name, staleness_bounds)
        flat = as_rows(shape)
        versions_2d = behavior_versions.detach().reshape(flat)
        mask_2d, proximal_2d = valid_mask.reshape(flat), proximal.reshape(flat)
        for part in row_chunks(*flat):
            _record_chunk(
                tracker, versions_2d[part], float(current_version), proximal_2d[part], mask_2d[part]
            )


def _proximal(value, current, versions: torch.Tensor, key: str) -> torch.Tensor:
    if value is None:
        value = current
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to(device=versions.device, dtype=torch.float64)
        try:
            return torch.broadcast_to(tensor, versions.shape)
        except RuntimeError as exc:
            raise ShapeMismatchError(
                f"{key!r}: proximal_version shape {tuple(tensor.shape)} does not broadcast "
                f"to {tuple(versions.shape)}"
            ) from exc
    return torch.full(versions.shape, float(value), dtype=torch.float64, device=versions.device)


def _record_chunk(
    tracker: DistributedStatsTracker,
    versions: torch.Tensor,
    current: float,
    proximal: torch.Tensor,
    mask: torch.Tensor,
) -> None:
    behavior = versions.to(torch.float64)
    valid = mask & (behavior >= 0)
    theta = current - behavior
    prox = proximal - behavior
    tracker.denominator(n_valid_tokens=mask, n_valid_generated_tokens=valid)
    for name, value in (("theta", theta), ("proximal", prox)):
        for suffix, reduce in (
            ("avg", ReduceType.AVG),
            ("min", ReduceType.MIN),
            ("max", ReduceType.MAX),
        ):
            tracker.stat(
                denominator="n_valid_generated_tokens",
                reduce_type=reduce,
                **{f"sample_staleness_{name}_{suffix}": value},
            )
    tracker.stat(
        denominator="n_valid_generated_tokens",
        reduce_type=ReduceType.AVG,
        stale_token_fraction=(behavior < current).to(torch.float64),
        future_token_fraction=(behavior > current).to(torch.float64),
        v_theta=torch.full_like(behavior, current),
        v_proximal=proximal,
    )
