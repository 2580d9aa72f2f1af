"""DPOMetric against a plain-Python reference, both batch layouts, and 2 gloo ranks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.twinkle import DPOMetric
from telemetry.model.errors import InvalidValueError
from tests.distributed import run_ranks

BETA = 0.3


def batch(seed: int, pairs: int = 4, width: int = 10):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 50, (2 * pairs, width), generator=gen)
    labels[torch.rand(2 * pairs, width, generator=gen) < 0.4] = -100
    logps = -torch.rand(2 * pairs, width, generator=gen, dtype=torch.float64) * 3
    ref = logps + torch.randn(2 * pairs, width, generator=gen, dtype=torch.float64) * 0.5
    logps[labels == -100] = math.nan  # padded positions never count
    return labels, logps, ref


def seq_sums(labels, logps) -> list[float]:
    return [
        math.fsum(float(x) for x, lab in zip(row, lrow, strict=True) if lab != -100)
        for row, lrow in zip(logps, labels, strict=True)
    ]


def reference(batches, layout: str) -> dict[str, float]:
    rows = []  # (chosen, rejected, ref_chosen, ref_rejected)
    for labels, logps, ref in batches:
        pol, rf = seq_sums(labels, logps), seq_sums(labels, ref)
        n = len(pol) // 2
        if layout == "interleaved":
            idx = [(2 * i, 2 * i + 1) for i in range(n)]
        else:
            idx = [(i, n + i) for i in range(n)]
        rows += [(pol[c], pol[r], rf[c], rf[r]) for c, r in idx]
    n = len(rows)
    rc = [BETA * (c - refc) for c, _, refc, _ in rows]
    rr = [BETA * (r - refr) for _, r, _, refr in rows]
    return {
        "chosen_logps": math.fsum(r[0] for r in rows) / n,
        "rejected_logps": math.fsum(r[1] for r in rows) / n,
        "ref_chosen_logps": math.fsum(r[2] for r in rows) / n,
        "ref_rejected_logps": math.fsum(r[3] for r in rows) / n,
        "rewards/chosen": math.fsum(rc) / n,
        "rewards/rejected": math.fsum(rr) / n,
        "accuracy": sum(c > r for c, r in zip(rc, rr, strict=True)) / n,
        "margin": math.fsum(c - r for c, r in zip(rc, rr, strict=True)) / n,
    }


def assert_close(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    assert all(type(v) is float for v in got.values())
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize("layout", ["interleaved", "split"])
def test_layouts_match_reference(layout):
    metric = DPOMetric(beta=BETA, layout=layout)
    batches = [batch(0), batch(1, pairs=3, width=6)]
    for labels, logps, ref in batches:
        metric.accumulate({"labels": labels}, {"logps": logps}, ref_outputs={"logps": ref})
    expected = reference(batches, layout)
    assert 0 < expected["accuracy"] < 1
    assert_close(metric.calculate(), expected)


def test_layouts_differ_on_the_same_batch():
    labels, logps, ref = batch(2)
    results = []
    for layout in ("interleaved", "split"):
        metric = DPOMetric(beta=BETA, layout=layout)
        metric.accumulate({"labels": labels}, {"logps": logps}, ref_outputs={"logps": ref})
        results.append(metric.calculate()["chosen_logps"])
    assert results[0] != pytest.approx(results[1])


def test_without_reference_only_policy_logps():
    labels, logps, ref = batch(3)
    metric = DPOMetric(beta=BETA)
    metric.accumulate({"labels": labels}, {"logps": logps})
    expected = reference([(labels, logps, ref)], "interleaved")
    assert_close(metric.calculate(), {k: expected[k] for k in ("chosen_logps", "rejected_logps")})


def test_odd_batch_is_a_clear_error():
    labels, logps, ref = batch(4)
    metric = DPOMetric(beta=BETA)
    with pytest.raises(InvalidValueError, match="7 sequences.*even"):
        metric.accumulate({"labels": labels[:7]}, {"logps": logps[:7]})
    with pytest.raises(InvalidValueError, match="layout"):
        DPOMetric(layout="zipped")
    with pytest.raises(InvalidValueError, match="ref_logps"):
        metric.accumulate({"labels": labels}, {"logps": logps}, ref_outputs={"logps": ref[:, :3]})


def test_empty_window_reports_nothing():
    assert DPOMetric().calculate() == {}


def _two_ranks(rank: int, world: int) -> dict:
    labels, logps, ref = batch(20 + rank, pairs=[2, 5][rank])
    metric = DPOMetric(process_group=dist.group.WORLD, beta=BETA, layout="split")
    metric.accumulate({"labels": labels}, {"logps": logps}, ref_outputs={"logps": ref})
    return metric.calculate()


def test_two_gloo_ranks_with_unequal_pairs_equal_concatenated():
    results = run_ranks(_two_ranks, 2)
    expected = reference([batch(20, pairs=2), batch(21, pairs=5)], "split")
    for got in results:
        assert_close(got, expected)
