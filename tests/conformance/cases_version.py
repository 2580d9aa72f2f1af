"""Version staleness: AReaL's ``_log_version_staleness_stats`` against ``record_version_stats``.

AReaL 1.0.4 calls ``_log_version_staleness_stats`` once per loss micro-batch (inside
``grpo_loss_fn``) and publishes ``scalar()`` values, so its export averages per-call numbers;
rltel pools tokens as the source documents define (docs/producers.md, staleness). Both run
on the same micro-batches under ``ppo_actor/update``: two with generated tokens of unequal
size, one whose versions are all -1 (no generated token) and one with no valid token.

Expected values of every difference come from the numpy references below, written from
each side's definition, not from either implementation.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import torch

from telemetry.metrics.staleness import record_version_stats
from telemetry.record.tracker import DistributedStatsTracker
from tests.conformance import loader
from tests.conformance.cases import Case

CURRENT = 7
K = "ppo_actor/update/version_stats/"
Batch = tuple[torch.Tensor, torch.Tensor]


def _batch(versions: list[list[int]], mask: list[list[int]]) -> Batch:
    return torch.tensor(versions), torch.tensor(mask, dtype=torch.bool)


MICRO_BATCHES: tuple[Batch, ...] = (
    # 7 generated tokens; one valid token has version -1 (counted in n_valid_tokens only).
    _batch([[-1, -1, 5, 5, 6, 7], [-1, 4, 4, 4, -1, -1]], [[0, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0]]),
    # 3 generated tokens, one from a version newer than the current one.
    _batch([[-1, 2, 3, 8, 0]], [[0, 1, 1, 1, 0]]),
    # valid tokens, none generated (versions -1)
    _batch([[-1, -1, -1], [-1, -1, -1]], [[1, 1, 0], [1, 0, 0]]),
    # no valid token
    _batch([[3, 3, 3]], [[0, 0, 0]]),
)


# -- the two definitions, in numpy -------------------------------------------------------


def _qualifying(batch: Batch) -> np.ndarray:
    versions, mask = (t.numpy() for t in batch)
    return versions[mask & (versions >= 0)].astype(np.float64)


def areal_reference(batches: tuple[Batch, ...], current: int) -> dict[str, Any]:
    """AReaL 1.0.4: one scalar per call with a generated token, averaged over those calls;
    proximal = current - 1; ``n_valid_tokens`` sums the masks."""
    calls = [v for v in map(_qualifying, batches) if v.size]
    out: dict[str, Any] = {K + "n_valid_tokens": float(sum(int(m.sum()) for _, m in batches))}
    per_call = {
        "sample_staleness_proximal": [current - 1 - v for v in calls],
        "sample_staleness_theta": [current - v for v in calls],
    }
    for name, values in per_call.items():
        for suffix, fn in (("avg", np.mean), ("max", np.max), ("min", np.min)):
            out[f"{K}{name}_{suffix}"] = float(np.mean([fn(v) for v in values]))
    out[K + "v_theta"] = float(current)
    out[K + "v_proximal"] = float(current - 1)
    out[K + "n_valid_generated_tokens"] = float(np.mean([v.size for v in calls]))
    for key in [k for k in out if k != K + "n_valid_tokens"]:  # the scalars
        out[key + "__count"] = len(calls)
    return out


def rltel_reference(
    batches: tuple[Batch, ...], current: int, proximal: int | None = None
) -> dict[str, Any]:
    """The source documents: token-weighted means, global extrema, summed counts."""
    behavior = np.concatenate([_qualifying(b) for b in batches])
    proximal = current if proximal is None else proximal
    out: dict[str, Any] = {
        K + "n_valid_tokens": float(sum(int(m.sum()) for _, m in batches)),
        K + "n_valid_generated_tokens": float(behavior.size),
    }
    for name, values in (("theta", current - behavior), ("proximal", proximal - behavior)):
        for suffix, fn in (("avg", np.mean), ("max", np.max), ("min", np.min)):
            out[f"{K}sample_staleness_{name}_{suffix}"] = float(fn(values))
    out[K + "stale_token_fraction"] = float(np.mean(behavior < current))
    out[K + "future_token_fraction"] = float(np.mean(behavior > current))
    out[K + "v_theta"] = float(current)
    out[K + "v_proximal"] = float(proximal)
    return out


# -- the two implementations ---------------------------------------------------------------


@cache
def areal_export(n_batches: int = len(MICRO_BATCHES)) -> dict[str, Any]:
    """AReaL's own function on AReaL's tracker, one call per micro-batch."""
    tracker = loader.stats_tracker()
    namespace = {"torch": torch, "stats_tracker": tracker}
    names = ["_tensor_scalar_stats", "_log_version_staleness_stats"]
    log = loader.definitions("trainer/ppo/actor.py", names, namespace)[names[1]]
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        for versions, mask in MICRO_BATCHES[:n_batches]:
            log(versions=versions, current_version=CURRENT, version_metrics_mask=mask)
    return dict(tracker.export_all())


@cache
def rltel_export(n_batches: int = len(MICRO_BATCHES), proximal: int | None = None) -> dict:
    """rltel's producer on a fresh tracker, one call per micro-batch."""
    tracker = DistributedStatsTracker()
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        for versions, mask in MICRO_BATCHES[:n_batches]:
            record_version_stats(
                versions, CURRENT, mask, proximal_version=proximal, tracker=tracker
            )
    return dict(tracker.export())


# -- the cases -----------------------------------------------------------------------------

CALL = "_log_version_staleness_stats(versions, 7, mask) per micro-batch (4) → {}"
SHARED = [
    k
    for k in rltel_reference(MICRO_BATCHES, CURRENT)
    if k in areal_reference(MICRO_BATCHES, CURRENT)
]

WHY = {
    "sample_staleness_proximal_avg": "AReaL: proximal = current − 1 and a mean of per-call "
    "means; rltel: proximal = current (seed) and token-weighted",
    "sample_staleness_proximal_min": "AReaL: proximal = current − 1 and a mean of per-call "
    "minima; rltel: proximal = current (seed) and the global minimum",
    "sample_staleness_proximal_max": "AReaL: proximal = current − 1 and a mean of per-call "
    "maxima; rltel: proximal = current (seed) and the global maximum",
    "sample_staleness_theta_avg": "AReaL: mean of per-call means; rltel: token-weighted (seed)",
    "sample_staleness_theta_min": "AReaL: mean of per-call minima; rltel: global minimum (seed)",
    "sample_staleness_theta_max": "AReaL: mean of per-call maxima; rltel: global maximum (seed)",
    "n_valid_generated_tokens": "AReaL: mean count per call; rltel: the sum (seed)",
    "v_proximal": "AReaL: current − 1; rltel: the proximal version its proximal staleness "
    "used (current by default; pass proximal_version=current − 1 for AReaL's)",
}


def _key_case(key: str) -> Case:
    """One exported key, AReaL's value against rltel's, on the four micro-batches."""
    areal_value, rltel_value = (
        ref(MICRO_BATCHES, CURRENT).get(key) for ref in (areal_reference, rltel_reference)
    )
    name = key.removeprefix(K)
    why = WHY.get(name, "")
    if not why and areal_value != rltel_value:
        why = "rltel's own key (the seed's); AReaL 1.0.4 has none"
    return Case(
        name=f"version_{name}",
        call=CALL.format(name),
        areal=lambda: areal_export().get(key),
        rltel=lambda: rltel_export().get(key),
        why=why,
        expected=(areal_value, rltel_value) if why else None,
    )


def _only_counts(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k.endswith("__count")}


def _shared(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: stats[k] for k in SHARED if k in stats}


CASES: list[Case] = [
    *(_key_case(key) for key in rltel_reference(MICRO_BATCHES, CURRENT)),
    Case(
        name="version_counts",
        call=CALL.format("<key>__count"),
        areal=lambda: _only_counts(areal_export()),
        rltel=lambda: _only_counts(rltel_export()),
        why="AReaL's scalars carry a count of calls; rltel's token-weighted stats have none "
        "(StatsLogger drops __count keys before logging)",
        expected=(_only_counts(areal_reference(MICRO_BATCHES, CURRENT)), {}),
    ),
    Case(
        name="version_one_call_proximal_current_minus_1",
        call="one micro-batch; record_version_stats(..., proximal_version=7 - 1)",
        areal=lambda: _shared(areal_export(1)),
        rltel=lambda: _shared(rltel_export(1, CURRENT - 1)),
    ),
]
