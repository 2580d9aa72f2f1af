"""Advantage sign fractions against a plain-Python reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.advantages import record_advantage_fractions
from telemetry.model.errors import MaskTypeError, ShapeMismatchError
from telemetry.record.tracker import DistributedStatsTracker
from tests.distributed import run_ranks

P = "ppo_actor/"
KEYS = [f"{P}advantage_{s}_fraction" for s in ("positive", "negative", "zero")]


def reference(adv, mask) -> dict[str, float]:
    vals = [a for a, m in zip(adv, mask, strict=True) if m]
    out = {f"{P}advantage_n_tokens": float(len(vals))}
    if vals:
        out[KEYS[0]] = sum(a > 0 for a in vals) / len(vals)
        out[KEYS[1]] = sum(a < 0 for a in vals) / len(vals)
        out[KEYS[2]] = sum(a == 0 for a in vals) / len(vals)
    return out


def random_batch(seed: int, shape=(4, 19)):
    gen = torch.Generator().manual_seed(seed)
    adv = torch.randn(shape, generator=gen, dtype=torch.float64)
    adv[torch.rand(shape, generator=gen) < 0.3] = 0.0
    return adv, torch.rand(shape, generator=gen) > 0.4


def record(tracker, adv, mask) -> dict:
    with tracker.scope("ppo_actor"):
        record_advantage_fractions(adv, mask, tracker=tracker)


def assert_matches(stats: dict, expected: dict) -> None:
    got = {k: v for k, v in stats.items() if k.startswith(P) and not k.endswith("__count")}
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-12), key


@pytest.fixture
def tracker() -> DistributedStatsTracker:
    return DistributedStatsTracker()


def test_fractions_over_loss_mask_match_reference(tracker):
    (a1, m1), (a2, m2) = random_batch(0), random_batch(1, shape=(3, 6))
    a1[~m1] = math.nan  # padding never counts
    record(tracker, a1, m1)
    record(tracker, a2, m2.int())
    expected = reference(
        a1.flatten().tolist() + a2.flatten().tolist(), m1.flatten().tolist() + m2.flatten().tolist()
    )
    stats = tracker.export()
    assert_matches(stats, expected)
    assert sum(stats[k] for k in KEYS) == pytest.approx(1.0)


def test_nan_advantage_on_valid_token_counts_in_no_fraction(tracker):
    adv, mask = random_batch(2)
    mask[0, 0], adv[0, 0] = True, math.nan
    record(tracker, adv, mask)
    stats = tracker.export()
    assert_matches(stats, reference(adv.flatten().tolist(), mask.flatten().tolist()))
    assert sum(stats[k] for k in KEYS) == pytest.approx(1 - 1 / mask.sum().item())


def test_no_valid_tokens(tracker):
    adv, mask = random_batch(3)
    record(tracker, adv, torch.zeros_like(mask))
    assert_matches(tracker.export(), {f"{P}advantage_n_tokens": 0.0})


def test_errors(tracker):
    adv, mask = random_batch(4)
    with pytest.raises(ShapeMismatchError, match="ppo_actor"):
        record(tracker, adv, mask[:, 1:])
    with pytest.raises(MaskTypeError, match="ppo_actor"):
        record(tracker, adv, mask.double())


def test_recording_never_reads_values_on_the_host(tracker):
    meta = torch.empty(3, 16, device="meta")
    record(tracker, meta, torch.empty(3, 16, dtype=torch.bool, device="meta"))
    # The same code path on real tensors records the reference values.
    adv, mask = random_batch(31, shape=(3, 16))
    real = DistributedStatsTracker()
    record(real, adv, mask)
    assert_matches(dict(real.export()), reference(adv.flatten().tolist(), mask.flatten().tolist()))


def _two_ranks(rank: int, world: int) -> dict:
    adv, mask = random_batch(10 + rank, shape=[(2, 40), (5, 3)][rank])
    tracker = DistributedStatsTracker()
    record(tracker, adv, mask)
    return dict(tracker.export(reduce_group=dist.group.WORLD))


def test_two_gloo_ranks_equal_concatenated():
    results = run_ranks(_two_ranks, 2)
    batches = [random_batch(10 + r, shape=s) for r, s in enumerate([(2, 40), (5, 3)])]
    expected = reference(
        [x for a, _ in batches for x in a.flatten().tolist()],
        [x for _, m in batches for x in m.flatten().tolist()],
    )
    for stats in results:
        assert_matches(stats, expected)
