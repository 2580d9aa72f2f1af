"""GRPO/GSPO/CISPO metrics against a plain-Python reference of their formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.twinkle import CISPOMetric, GRPOMetric, GSPOMetric
from telemetry.model.errors import InvalidValueError
from telemetry.record.tracker import DistributedStatsTracker
from tests.distributed import run_ranks

EPS, EPS_HIGH, TEMP = 0.2, 0.28, 0.7


def batch(seed: int, rows: int = 5, width: int = 9, vocab: int = 6):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, vocab, (rows, width), generator=gen)
    labels[torch.rand(rows, width, generator=gen) < 0.3] = -100
    labels[0] = -100  # a sequence without generated tokens
    logits = torch.randn(rows, width, vocab, generator=gen, dtype=torch.float64)
    new = torch.log_softmax(logits / TEMP, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    old = new + torch.randn(rows, width, generator=gen, dtype=torch.float64) * 0.3
    new = torch.where(labels == -100, math.nan, new)  # padding garbage never counts
    adv = torch.randn(rows, generator=gen, dtype=torch.float64)
    return labels, logits, new, old, adv


def tokens(b):
    """Per valid token: (row, pos, label, new, old, adv, entropy) as Python floats."""
    labels, logits, new, old, adv = b
    out = []
    for i in range(labels.shape[0]):
        for j in range(labels.shape[1]):
            if labels[i, j] != -100:
                z = [float(x) / TEMP for x in logits[i, j]]
                top = max(z)
                log_norm = top + math.log(math.fsum(math.exp(x - top) for x in z))
                ent = -math.fsum(math.exp(x - log_norm) * (x - log_norm) for x in z)
                out.append(
                    (
                        i,
                        j,
                        int(labels[i, j]),
                        float(new[i, j]),
                        float(old[i, j]),
                        float(adv[i]),
                        ent,
                    )
                )
    return out


def reference(batches, kind: str = "grpo", top_k: int = 0, ranks=None) -> dict[str, float]:
    toks, seqs, top = [], [], []
    for b_index, b in enumerate(batches):
        rank, offset = (
            ranks[b_index] if ranks else (0, sum(x[0].shape[0] for x in batches[:b_index]))
        )
        ts = tokens(b)
        toks += ts
        for i in range(b[0].shape[0]):
            ds = [t[3] - t[4] for t in ts if t[0] == i]
            if ds:
                seqs.append((math.exp(math.fsum(ds) / len(ds)), float(b[4][i])))
        top += [
            (math.expm1(t[3] - t[4]) - (t[3] - t[4]), t[2], rank, t[0] + offset, t[1]) for t in ts
        ]
    n = len(toks)
    mean_new = math.fsum(TEMP * t[3] for t in toks) / n
    out = {
        "train/mean_new_logp": mean_new,
        "train/policy_confidence": math.exp(mean_new),
        "train/mean_old_logp": math.fsum(TEMP * t[4] for t in toks) / n,
        "train/approx_kl": math.fsum(math.exp(t[3] - t[4]) - 1 - (t[3] - t[4]) for t in toks) / n,
        "train/entropy": math.fsum(t[6] for t in toks) / n,
    }
    if kind == "gspo":
        low = sum(s < 1 - EPS and a < 0 for s, a in seqs)
        high = sum(s > 1 + EPS_HIGH and a > 0 for s, a in seqs)
        den = len(seqs)
    else:
        gated = kind == "grpo"
        ratios = [(math.exp(t[3] - t[4]), t[5]) for t in toks]
        low = sum(r < 1 - EPS and (a < 0 or not gated) for r, a in ratios)
        high = sum(r > 1 + EPS_HIGH and (a > 0 or not gated) for r, a in ratios)
        den = n
    out["train/clip_ratio_low"] = low / den
    out["train/clip_ratio_high"] = high / den
    out["train/clip_ratio"] = (low + high) / den
    for i, row in enumerate(sorted(top, key=lambda r: -r[0])[:top_k]):
        for name, value in zip(
            ("kl", "token_id", "rank", "sequence", "position"), row, strict=True
        ):
            out[f"train/top_kl/{i}/{name}"] = float(value)
    return out


def feed(metric, b, with_logits: bool = True) -> None:
    labels, logits, new, old, adv = b
    outputs = {"logps": new, "logits": logits} if with_logits else {"logps": new}
    metric.accumulate({"labels": labels}, outputs, old_logps=old, advantages=adv)


def assert_close(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-9, abs=1e-12), key


CLASSES = {"grpo": GRPOMetric, "gspo": GSPOMetric, "cispo": CISPOMetric}


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_metrics_over_two_micro_batches_match_reference(kind):
    metric = CLASSES[kind](epsilon=EPS, epsilon_high=EPS_HIGH, temperature=TEMP, top_k_kl=4)
    batches = [batch(0), batch(1, rows=3, width=12)]
    for b in batches:
        feed(metric, b)
    assert_close(metric.calculate(), reference(batches, kind, top_k=4))
    assert metric.calculate() == {}  # calculate resets


def test_list_of_micro_batches_splits_keyword_lists():
    metric = GRPOMetric(epsilon=EPS, epsilon_high=EPS_HIGH, temperature=TEMP)
    batches = [batch(2), batch(3, rows=2)]
    metric.accumulate(
        [{"labels": b[0]} for b in batches],
        [{"logps": b[2], "logits": b[1]} for b in batches],
        old_logps=[b[3] for b in batches],
        advantages=[b[4] for b in batches],
    )
    assert_close(metric.calculate(), reference(batches))


def test_per_token_advantages_and_given_entropies():
    labels, logits, new, old, adv = batch(4)
    ent = torch.tensor([[t for t in range(labels.shape[1])]] * labels.shape[0], dtype=torch.float64)
    metric = GRPOMetric(epsilon=EPS, epsilon_high=EPS_HIGH, temperature=TEMP)
    metric.accumulate(
        {"labels": labels},
        {"logps": new, "entropies": ent},
        old_logps=old,
        advantages=adv[:, None].expand_as(new),
    )
    got = metric.calculate()
    mask = labels != -100
    assert got["train/entropy"] == pytest.approx(ent[mask].mean().item())
    expected = reference([(labels, logits, new, old, adv)])
    assert got["train/clip_ratio"] == pytest.approx(expected["train/clip_ratio"])


def test_entropy_from_logits_with_masked_vocabulary_is_finite():
    labels = torch.tensor([[1, 2, -100]])
    logits = torch.tensor(
        [[[0.5, 1.5, -math.inf, 0.0], [-math.inf, 2.0, 1.0, -math.inf], [0.0, 0.0, 0.0, 0.0]]],
        dtype=torch.float64,
    )
    new = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    metric = GRPOMetric()
    metric.accumulate({"labels": labels}, {"logps": new, "logits": logits})

    def entropy(row):  # only the tokens that can be drawn (p > 0) contribute
        kept = [x for x in row if x != -math.inf]
        norm = math.log(math.fsum(math.exp(x) for x in kept))
        return -math.fsum(math.exp(x - norm) * (x - norm) for x in kept)

    expected = (entropy([0.5, 1.5, -math.inf, 0.0]) + entropy([-math.inf, 2.0, 1.0, -math.inf])) / 2
    assert metric.calculate()["train/entropy"] == pytest.approx(expected, rel=1e-12)


def test_without_old_logps_only_new_policy_values():
    labels, _, new, _, _ = batch(5)
    metric = GRPOMetric(temperature=TEMP)
    metric.accumulate({"labels": labels}, {"logps": new})
    got = metric.calculate()
    assert set(got) == {"train/mean_new_logp", "train/policy_confidence"}
    mask = labels != -100
    assert got["train/mean_new_logp"] == pytest.approx(TEMP * new[mask].mean().item())


def test_no_generated_tokens_yields_nothing():
    labels, logits, new, old, adv = batch(6)
    metric = GRPOMetric(top_k_kl=3)
    feed(metric, (torch.full_like(labels, -100), logits, new, old, adv))
    assert metric.calculate() == {}


def test_bad_inputs_raise():
    labels, _, new, old, _ = batch(7)
    with pytest.raises(InvalidValueError, match="old_logps"):
        GRPOMetric().accumulate({"labels": labels}, {"logps": new}, old_logps=old[:, :-1])
    with pytest.raises(InvalidValueError, match="logps"):
        GRPOMetric().accumulate({"labels": labels}, {})
    with pytest.raises(InvalidValueError):
        GRPOMetric(temperature=0)


def test_tracker_export_carries_the_same_values():
    tracker = DistributedStatsTracker()
    metric = GRPOMetric(epsilon=EPS, epsilon_high=EPS_HIGH, temperature=TEMP, top_k_kl=2)
    from telemetry import stats_tracker

    batches = [batch(8)]
    feed(metric, batches[0])
    try:
        metric.attach()
        stats = stats_tracker.export_sources([tracker, metric])
    finally:
        stats_tracker.unregister_source(metric)
    assert_close(dict(stats), reference(batches, top_k=2))
    assert metric.calculate() == {}  # the export reset the window


SHAPES = [(4, 7), (2, 13)]


def _two_ranks(rank: int, world: int) -> dict:
    b = batch(30 + rank, *SHAPES[rank])
    metric = GSPOMetric(
        process_group=dist.group.WORLD,
        epsilon=EPS,
        epsilon_high=EPS_HIGH,
        temperature=TEMP,
        top_k_kl=5,
    )
    feed(metric, b)
    return metric.calculate()


def test_two_gloo_ranks_pool_sums_and_gather_top_k():
    results = run_ranks(_two_ranks, 2)
    batches = [batch(30 + r, *s) for r, s in enumerate(SHAPES)]
    expected = reference(batches, "gspo", top_k=5, ranks=[(0, 0), (1, 0)])
    assert {expected[f"train/top_kl/{i}/rank"] for i in range(5)} == {0.0, 1.0}
    for got in results:
        assert_close(got, expected)
