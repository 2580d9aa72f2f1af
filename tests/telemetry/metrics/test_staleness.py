"""Version staleness stats against a numpy reference of the seed's definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.staleness import DEFAULT_STALENESS_BOUNDS, record_version_stats
from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.model.snapshot import Histogram
from telemetry.record.tracker import DistributedStatsTracker
from tests.distributed import run_ranks

P = "ppo_actor/update/version_stats/"


def reference(versions, current, mask, proximal=None) -> dict[str, float]:
    """The seed's definitions over flat token lists, in numpy float64 (``current`` and
    ``proximal`` a number or one value per token)."""
    versions = np.asarray(versions, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    current = np.broadcast_to(np.asarray(current, dtype=np.float64), versions.shape)
    proximal = current if proximal is None else np.asarray(proximal, dtype=np.float64)
    valid = mask & (versions >= 0)
    out = {
        f"{P}n_valid_tokens": float(mask.sum()),
        f"{P}n_valid_generated_tokens": float(valid.sum()),
    }
    if not valid.any():
        return out
    behavior, now = versions[valid], current[valid]
    prox = np.broadcast_to(proximal, versions.shape)[valid]
    for name, values in (("theta", now - behavior), ("proximal", prox - behavior)):
        out[f"{P}sample_staleness_{name}_avg"] = float(values.mean())
        out[f"{P}sample_staleness_{name}_min"] = float(values.min())
        out[f"{P}sample_staleness_{name}_max"] = float(values.max())
    out[f"{P}stale_token_fraction"] = float((behavior < now).mean())
    out[f"{P}future_token_fraction"] = float((behavior > now).mean())
    out[f"{P}v_theta"] = float(now.mean())
    out[f"{P}v_proximal"] = float(prox.mean())
    return out


def record(tracker, *args, **kw) -> None:
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        record_version_stats(*args, tracker=tracker, **kw)


def assert_matches(stats: dict, expected: dict) -> None:
    got = {k: v for k, v in stats.items() if k.startswith(P) and not k.endswith("__count")}
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-12, abs=1e-12), key


def random_batch(seed: int, shape=(5, 23)):
    gen = torch.Generator().manual_seed(seed)
    versions = torch.randint(-2, 9, shape, generator=gen)  # includes negative (unknown)
    mask = torch.rand(shape, generator=gen) > 0.3
    return versions, mask


@pytest.fixture
def tracker() -> DistributedStatsTracker:
    return DistributedStatsTracker()


def test_random_versions_with_negatives_match_reference(tracker):
    (v1, m1), (v2, m2) = random_batch(0), random_batch(1, shape=(2, 7))
    record(tracker, v1, 6, m1)
    record(tracker, v2, 6, m2)
    expected = reference(
        v1.flatten().tolist() + v2.flatten().tolist(),
        6,
        m1.flatten().tolist() + m2.flatten().tolist(),
    )
    assert expected[f"{P}future_token_fraction"] > 0 and expected[f"{P}stale_token_fraction"] > 0
    assert_matches(tracker.export(), expected)


def test_proximal_version_number_and_tensor(tracker):
    versions, mask = random_batch(2)
    record(tracker, versions, 8, mask, proximal_version=7)
    assert_matches(
        tracker.export(),
        reference(versions.flatten().tolist(), 8, mask.flatten().tolist(), [7] * versions.numel()),
    )
    per_token = torch.randint(3, 9, versions.shape, generator=torch.Generator().manual_seed(3))
    record(tracker, versions, 8, mask, proximal_version=per_token)
    assert_matches(
        tracker.export(),
        reference(
            versions.flatten().tolist(), 8, mask.flatten().tolist(), per_token.flatten().tolist()
        ),
    )


def test_version_means_are_token_weighted_across_calls(tracker):
    """v_theta, v_proximal and the staleness pool tokens when the version changes between
    calls in one window (a per-call mean would weight the small call as much as the big)."""
    (v1, m1), (v2, m2) = random_batch(7), random_batch(8, shape=(1, 5))
    record(tracker, v1, 6, m1, proximal_version=5)
    record(tracker, v2, 9, m2)
    n1, n2 = v1.numel(), v2.numel()
    expected = reference(
        v1.flatten().tolist() + v2.flatten().tolist(),
        [6] * n1 + [9] * n2,
        m1.flatten().tolist() + m2.flatten().tolist(),
        [5] * n1 + [9] * n2,
    )
    per_call = (6 + 9) / 2
    assert expected[f"{P}v_theta"] != pytest.approx(per_call)
    assert_matches(tracker.export(), expected)


def test_no_qualifying_tokens_omits_averages_and_extrema(tracker):
    versions, mask = random_batch(4)
    record(tracker, torch.full_like(versions, -1), 5, mask)  # all unknown versions
    record(tracker, versions, 5, torch.zeros_like(mask))  # nothing valid
    stats = tracker.export()
    assert_matches(
        stats,
        {f"{P}n_valid_generated_tokens": 0.0, f"{P}n_valid_tokens": float(mask.sum())},
    )


def test_staleness_buckets_match_numpy(tracker):
    versions, mask = random_batch(5)
    record(tracker, versions, 6, mask)
    points = {p.metric: p for p in tracker.export().points if isinstance(p, Histogram)}
    point = points[P + "sample_staleness_theta_avg"]
    sel = mask & (versions >= 0)
    staleness = (6 - versions[sel]).double().numpy()
    bounds = np.array(DEFAULT_STALENESS_BOUNDS)
    expected = np.bincount(
        np.searchsorted(bounds, staleness, side="left"), minlength=bounds.size + 1
    )
    assert list(point.bucket_counts) == expected.tolist()
    assert points[P + "sample_staleness_proximal_avg"].bucket_counts == point.bucket_counts


def test_errors_name_the_key(tracker):
    versions, mask = random_batch(6)
    with pytest.raises(ShapeMismatchError, match="version_stats"):
        record(tracker, versions, 3, mask[:, :-1])
    with pytest.raises(MaskTypeError, match="'ppo_actor/update/version_stats/mask'"):
        record(tracker, versions, 3, mask.float())
    with pytest.raises(InvalidValueError, match="current_version"):
        record(tracker, versions, math.nan, mask)
    with pytest.raises(InvalidValueError, match="version_stats"):
        record(tracker, versions, torch.tensor(3), mask)
    with pytest.raises(ShapeMismatchError, match="proximal_version"):
        record(tracker, versions, 3, mask, proximal_version=torch.zeros(3, 3))


def test_recording_never_reads_values_on_the_host(tracker):
    versions = torch.empty(4, 32, dtype=torch.long, device="meta")
    record(tracker, versions, 3, torch.empty(4, 32, dtype=torch.bool, device="meta"))
    # The same code path on real tensors records the reference values.
    versions, mask = random_batch(32, shape=(4, 32))
    real = DistributedStatsTracker()
    record(real, versions, 3, mask)
    assert_matches(
        dict(real.export()), reference(versions.flatten().tolist(), 3, mask.flatten().tolist())
    )


SHAPES = [(2, 31), (4, 5)]


def _two_ranks(rank: int, world: int) -> dict:
    versions, mask = random_batch(50 + rank, shape=SHAPES[rank])
    tracker = DistributedStatsTracker()
    record(tracker, versions, 7, mask)
    return dict(tracker.export(reduce_group=dist.group.WORLD))


def test_two_gloo_ranks_pool_global_extrema():
    results = run_ranks(_two_ranks, 2)
    batches = [random_batch(50 + r, shape=s) for r, s in enumerate(SHAPES)]
    expected = reference(
        [x for v, _ in batches for x in v.flatten().tolist()],
        7,
        [x for _, m in batches for x in m.flatten().tolist()],
    )
    for stats in results:
        assert_matches(stats, expected)
