"""CompletionRewardMetric and EmbeddingMetric against plain-Python references."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.twinkle import CompletionRewardMetric, EmbeddingMetric
from telemetry.model.errors import InvalidValueError
from tests.distributed import run_ranks

CALLS = [
    {
        "generation_time": 2.5,
        "weight_sync_time": 0.5,
        "rewards": {"accuracy": [1.0, 0.0, 1.0], "format": [0.5, 0.5, 0.0]},
        "completions": ["abcd", "ab", "abcdefgh"],
    },
    {
        "generation_time": 1.5,
        "rewards": {"accuracy": torch.tensor([0.0, 1.0]), "format": [1.0, 0.25]},
        "completion_lengths": [10, 3],
    },
]


def completion_reference(calls) -> dict[str, float]:
    gen = [c["generation_time"] for c in calls if "generation_time" in c]
    sync = [c["weight_sync_time"] for c in calls if "weight_sync_time" in c]
    named: dict[str, list[float]] = {}
    lengths: list[int] = []
    for c in calls:
        for k, v in c["rewards"].items():
            named.setdefault(k, []).extend(float(x) for x in v)
        lengths += [len(x) for x in c.get("completions", [])] + list(
            c.get("completion_lengths", [])
        )
    total = [math.fsum(vals) for vals in zip(*named.values(), strict=True)]
    out = {
        "generation_time": statistics.fmean(gen),
        "weight_sync_time": statistics.fmean(sync),
        "mean_reward": statistics.fmean(total),
        "reward_std": statistics.stdev(total),
        "reward_min": min(total),
        "reward_max": max(total),
        "mean_completion_length": statistics.fmean(lengths),
    }
    for k, vals in named.items():
        out |= {
            f"rewards/{k}/mean": statistics.fmean(vals),
            f"rewards/{k}/std": statistics.stdev(vals),
            f"rewards/{k}/min": min(vals),
            f"rewards/{k}/max": max(vals),
        }
    return out


def assert_close(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    assert all(type(v) is float for v in got.values())
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-12, abs=1e-12), key


def test_completion_reward_metric_matches_reference():
    metric = CompletionRewardMetric()
    for call in CALLS:
        metric.accumulate(None, None, **call)
    assert_close(metric.calculate(), completion_reference(CALLS))
    assert metric.calculate() == {}


def test_plain_reward_list_and_errors():
    metric = CompletionRewardMetric()
    metric.accumulate(None, None, rewards=[0.5])
    assert metric.calculate() == {
        "mean_reward": 0.5,
        "reward_std": 0.0,
        "reward_min": 0.5,
        "reward_max": 0.5,
    }
    with pytest.raises(InvalidValueError, match="differ in length"):
        metric.accumulate(None, None, rewards={"a": [1.0], "b": [1.0, 2.0]})


def _completion_ranks(rank: int, world: int) -> dict:
    metric = CompletionRewardMetric(process_group=dist.group.WORLD)
    metric.accumulate(None, None, **CALLS[rank])
    return metric.calculate()


def test_completion_two_gloo_ranks_equal_concatenated():
    for got in run_ranks(_completion_ranks, 2):
        assert_close(got, completion_reference(CALLS))


def embedding_batch(seed: int, pairs: int, dim: int = 6):
    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(2 * pairs, dim, generator=gen, dtype=torch.float64)
    labels = torch.tensor([1, 0] * pairs)
    return emb, labels


def cos(a, b) -> float:
    a, b = a.tolist(), b.tolist()
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a)) / math.sqrt(math.fsum(y * y for y in b))


def embedding_reference(batches, losses) -> dict[str, float]:
    pos, neg = [], []
    for emb, _ in batches:
        anchors, positives = emb[0::2], emb[1::2]
        pos += [cos(a, p) for a, p in zip(anchors, positives, strict=True)]
        neg += [
            cos(anchors[i], positives[j])
            for i in range(len(anchors))
            for j in range(len(anchors))
            if i != j
        ]
    return {
        "pos_sim": statistics.fmean(pos),
        "pos_sim_min": min(pos),
        "pos_sim_max": max(pos),
        "neg_sim": statistics.fmean(neg),
        "loss": statistics.fmean(losses),
        "grad_norm": 0.25,
    }


def test_embedding_metric_matches_reference():
    metric = EmbeddingMetric()
    batches = [embedding_batch(0, 4), embedding_batch(1, 3)]
    for (emb, labels), loss in zip(batches, (0.75, 0.5), strict=True):
        metric.accumulate({"labels": labels}, {"embeddings": emb, "loss": loss}, grad_norm=0.25)
    assert_close(metric.calculate(), embedding_reference(batches, [0.75, 0.5]))


def test_embedding_three_dim_uses_first_token_and_counts_unpaired_anchor():
    emb, labels = embedding_batch(2, 3)
    metric = EmbeddingMetric()
    hidden = torch.stack([emb, torch.randn_like(emb)], dim=1)  # [N, T=2, D]
    metric.accumulate({"labels": labels}, {"logits": hidden})
    got = metric.calculate()
    expected = embedding_reference([(emb, labels)], [1.0])
    assert got["pos_sim"] == pytest.approx(expected["pos_sim"])
    metric.accumulate({"labels": torch.tensor([1, 0, 1])}, {"embeddings": emb[:3]})
    got = metric.calculate()
    assert got["unpaired_anchors"] == 1.0 and got["pos_sim"] == pytest.approx(cos(emb[0], emb[1]))
    assert "neg_sim" not in got  # one complete pair: no in-batch negatives
    with pytest.raises(InvalidValueError, match="labels"):
        metric.accumulate({"labels": labels[:-1]}, {"embeddings": emb})


def _embedding_ranks(rank: int, world: int) -> dict:
    metric = EmbeddingMetric(process_group=dist.group.WORLD)
    emb, labels = embedding_batch(10 + rank, [2, 5][rank])
    metric.accumulate(
        {"labels": labels}, {"embeddings": emb, "loss": [0.5, 1.5][rank]}, grad_norm=0.25
    )
    return metric.calculate()


def test_embedding_two_gloo_ranks_pool_pair_counts():
    batches = [embedding_batch(10, 2), embedding_batch(11, 5)]
    expected = embedding_reference(batches, [0.5, 1.5])
    for got in run_ranks(_embedding_ranks, 2):
        assert_close(got, expected)


def test_twinkle_generate_time_is_the_generation_timing():
    metric = CompletionRewardMetric()
    # Twinkle's names: generate_time=, rewards as a mapping, completion_lengths=
    metric.accumulate(None, None, generate_time=2.0, rewards={"acc": [1.0]}, completion_lengths=[4])
    metric.accumulate(None, None, generate_time=torch.tensor(4.5), weight_sync_time=0.5)
    metric.accumulate(None, None, generation_time=3.0)  # the source documents' name
    got = metric.calculate()
    assert got["generation_time"] == statistics.fmean([2.0, 4.5, 3.0])
    assert got["weight_sync_time"] == 0.5  # one call passed it
    assert got["mean_completion_length"] == 4.0
    with pytest.raises(InvalidValueError, match="name the same timing"):
        metric.accumulate(None, None, generate_time=1.0, generation_time=1.0)
    with pytest.raises(InvalidValueError) as caught:
        metric.accumulate(None, None, gen_time=1.0)
    assert str(caught.value) == (
        "CompletionRewardMetric.accumulate: unknown keyword 'gen_time'; accepted: "
        "completion_lengths, completions, generate_time, generation_time, rewards, "
        "weight_sync_time"
    )
    assert metric.calculate() == {}  # the rejected calls recorded nothing
