"""TrainMetric, LossMetric and Accuracy against plain-Python references; base behaviour."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist

from telemetry import stats_tracker
from telemetry.metrics.twinkle import (
    Accuracy,
    CISPOMetric,
    CompletionRewardMetric,
    DPOMetric,
    EmbeddingMetric,
    GRPOMetric,
    GSPOMetric,
    LossMetric,
    TrainMetric,
)
from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import Gauge
from tests.distributed import run_ranks


def test_train_metric_lr_step_elapsed_speed():
    metric = TrainMetric()
    metric.accumulate(None, None, lr=1e-4, step=8, gradient_accumulation_steps=4)
    time.sleep(0.05)
    first = metric.calculate()
    assert first["lr"] == 1e-4 and first["step"] == 2.0
    assert first["elapsed"] >= 0.05
    assert 0 < first["speed"] <= 2 / 0.05  # 2 optimizer steps in >= 0.05 s
    metric.accumulate(None, None, lr=[1e-4, 5e-5], step=16, gradient_accumulation_steps=4)
    time.sleep(0.05)
    second = metric.calculate()
    assert second["lr/param_group_0"] == 1e-4 and second["lr/param_group_1"] == 5e-5
    assert second["step"] == 4.0 and second["elapsed"] > first["elapsed"]
    assert 0 < second["speed"] <= 2 / 0.05
    with pytest.raises(InvalidValueError):
        metric.accumulate(None, None, step=1, gradient_accumulation_steps=0)


def test_train_metric_through_tracker_export_keeps_speed():
    metric = TrainMetric(prefix="train/")
    metric.accumulate(None, None, lr=3e-4, step=30, gradient_accumulation_steps=3)
    time.sleep(0.02)
    stats = stats_tracker.export_sources([metric])
    assert stats["train/lr"] == 3e-4 and stats["train/step"] == 10.0
    assert stats["train/speed"] > 0
    assert all(isinstance(p, Gauge) for p in stats.points)


def test_loss_metric_mean_and_sum_reductions():
    metric = LossMetric()
    losses = [torch.tensor(2.0), 4.0, torch.tensor(3.0)]
    for value in losses:
        metric.accumulate({}, {"loss": value}, grad_norm=1.5)
    assert metric.calculate() == {"loss": 3.0, "grad_norm": 1.5}
    labels = [torch.tensor([[1, -100, 2]]), torch.tensor([[-100, 4, 5, 6]])]
    for lab, loss in zip(labels, (6.0, 9.0), strict=True):
        metric.accumulate({"labels": lab}, {"loss": loss}, loss_reduction="sum")
    assert metric.calculate() == {"loss": 15.0 / 5}
    assert metric.calculate() == {}


def test_accuracy_ignores_minus_100_and_honours_completion_mask():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, 5, generator=gen)
    labels = torch.randint(0, 5, (3, 8), generator=gen)
    labels[0, :3] = -100
    pred = logits.argmax(-1).tolist()
    pairs = [
        (p, q)
        for pr, lr in zip(pred, labels.tolist(), strict=True)
        for p, q in zip(pr, lr, strict=True)
        if q != -100
    ]
    correct = sum(p == q for p, q in pairs)
    metric = Accuracy()
    metric.accumulate({"labels": labels}, {"logits": logits})
    assert metric.calculate() == {
        "accuracy": correct / len(pairs),
        "correct_tokens": float(correct),
        "total_tokens": float(len(pairs)),
    }
    mask = torch.zeros(3, 8, dtype=torch.bool)
    mask[1] = True
    metric.accumulate({"labels": labels, "completion_mask": mask}, {"logits": logits})
    row = sum(p == q for p, q in zip(pred[1], labels[1].tolist(), strict=True))
    assert metric.calculate()["accuracy"] == row / 8
    metric.accumulate({"labels": torch.full((1, 4), -100)}, {"logits": torch.zeros(1, 4, 3)})
    assert metric.calculate() == {"correct_tokens": 0.0, "total_tokens": 0.0}
    with pytest.raises(InvalidValueError, match="accuracy"):
        metric.accumulate({"labels": labels[:, 1:]}, {"logits": logits})


def test_micro_batch_lists_must_pair_up():
    with pytest.raises(InvalidValueError, match="2 inputs but 1 outputs"):
        LossMetric().accumulate([{}, {}], [{"loss": 1.0}])


def _two_ranks(rank: int, world: int) -> list[dict]:
    group = dist.group.WORLD
    loss, acc = LossMetric(process_group=group), Accuracy(process_group=group)
    for value in [[1.0, 2.0, 3.0], [10.0]][rank]:
        loss.accumulate({}, {"loss": value}, grad_norm=[0.5, 0.7][rank])
    gen = torch.Generator().manual_seed(rank)
    logits = torch.randn([2, 5][rank], 6, 4, generator=gen)
    labels = torch.randint(0, 4, logits.shape[:2], generator=gen)
    acc.accumulate({"labels": labels}, {"logits": logits})
    return [loss.calculate(), acc.calculate()]


def test_two_gloo_ranks_pool_counts_not_means():
    results = run_ranks(_two_ranks, 2)
    correct = total = 0
    for rank in range(2):
        gen = torch.Generator().manual_seed(rank)
        logits = torch.randn([2, 5][rank], 6, 4, generator=gen)
        labels = torch.randint(0, 4, logits.shape[:2], generator=gen)
        correct += int((logits.argmax(-1) == labels).sum())
        total += labels.numel()
    for loss, acc in results:
        assert loss == {"loss": 16.0 / 4, "grad_norm": 0.7}  # not (2 + 10) / 2
        assert acc["accuracy"] == pytest.approx(correct / total)
        assert acc["total_tokens"] == total


# Twinkle's calls: outputs["num_tokens"] divides a summed loss; unknown keywords raise.

SUM_CALLS = [  # (loss summed over the call's tokens, its num_tokens)
    (torch.tensor(6.0), torch.tensor(3)),
    (10.0, 5),
    (torch.tensor(0.0), torch.tensor(0)),  # a micro-batch without tokens
    (torch.tensor([1.5, 2.5]), 2),  # a loss tensor is summed
]


def sum_reference(calls) -> float:
    losses = [
        math.fsum(x.reshape(-1).tolist()) if isinstance(x, torch.Tensor) else x for x, _ in calls
    ]
    tokens = [int(n) for _, n in calls]
    return sum(losses) / sum(tokens)


def test_loss_metric_divides_summed_loss_by_output_num_tokens():
    metric = LossMetric()
    for loss, num_tokens in SUM_CALLS:
        metric.accumulate({}, {"loss": loss, "num_tokens": num_tokens}, grad_norm=0.5)
    assert metric.calculate() == {"loss": pytest.approx(sum_reference(SUM_CALLS)), "grad_norm": 0.5}
    assert sum_reference(SUM_CALLS) == 20.0 / 10  # not the mean of the per-call ratios


def test_loss_metric_num_tokens_wins_over_labels_and_explicit_mean_ignores_it():
    metric = LossMetric()
    labels = torch.tensor([[1, 2, -100, 4]])  # 3 labels, but the loss says 4 tokens
    metric.accumulate({"labels": labels}, {"loss": 8.0, "num_tokens": 4}, loss_reduction="sum")
    metric.accumulate([{"labels": labels}] * 2, {"loss": 12.0}, loss_reduction="sum")  # 6
    with pytest.raises(InvalidValueError, match="mean-reduced loss after sum-reduced"):
        metric.accumulate({}, {"loss": 1.0})  # no num_tokens, no loss_reduction: a mean
    assert metric.calculate() == {"loss": (8.0 + 12.0) / (4 + 6)}
    for value in (2.0, 5.0):  # Twinkle: under loss_reduction="mean" num_tokens is unused
        metric.accumulate({}, {"loss": value, "num_tokens": 100}, loss_reduction="mean")
    assert metric.calculate() == {"loss": 3.5}


def test_loss_metric_zero_tokens_gives_no_loss():
    metric = LossMetric()
    metric.accumulate({}, {"loss": 0.0, "num_tokens": torch.tensor(0)}, grad_norm=2.0)
    metric.accumulate({}, {"loss": torch.tensor(0.0), "num_tokens": 0})
    assert metric.calculate() == {"grad_norm": 2.0}  # 0 / 0 tokens: omitted, not 0 or NaN
    all_ignored = {"labels": torch.full((1, 3), -100)}
    metric.accumulate(all_ignored, {"loss": 0.0}, loss_reduction="sum")
    assert metric.calculate() == {}  # not the per-call mean either
    assert LossMetric().calculate() == {}  # no calls at all


def test_loss_metric_bad_reduction_and_missing_denominator():
    with pytest.raises(InvalidValueError, match="loss_reduction must be one of"):
        LossMetric().accumulate({}, {"loss": 1.0}, loss_reduction="avg")
    with pytest.raises(InvalidValueError, match="labels"):
        LossMetric().accumulate({}, {"loss": 1.0}, loss_reduction="sum")


def test_loss_metric_grad_norm_from_outputs():
    metric = LossMetric()
    metric.accumulate({}, {"loss": 1.0, "grad_norm": 0.25})
    assert metric.calculate() == {"loss": 1.0, "grad_norm": 0.25}


RANK_SUM_CALLS = [[(6.0, 3), (10.0, 5)], [(0.0, 0), (36.0, 12)]]


def _two_ranks_num_tokens(rank: int, world: int) -> dict:
    metric = LossMetric(process_group=dist.group.WORLD)
    for loss, num_tokens in RANK_SUM_CALLS[rank]:
        metric.accumulate({}, {"loss": torch.tensor(loss), "num_tokens": torch.tensor(num_tokens)})
    return metric.calculate()


def test_two_gloo_ranks_pool_summed_loss_by_tokens():
    expected = sum_reference(RANK_SUM_CALLS[0] + RANK_SUM_CALLS[1])
    assert expected == 52.0 / 20  # rank means 2.0 and 3.0 would average to 2.5
    for got in run_ranks(_two_ranks_num_tokens, 2):
        assert got == {"loss": pytest.approx(expected, rel=1e-15)}


def _ranks_mix_reductions(rank: int, world: int) -> str:
    metric = LossMetric(process_group=dist.group.WORLD)
    metric.accumulate({}, {"loss": 1.0, "num_tokens": 2} if rank == 0 else {"loss": 1.0})
    try:
        metric.calculate()
    except InvalidValueError as exc:
        return str(exc)
    return "no error"


def test_ranks_mixing_reductions_fail_on_every_rank():
    for message in run_ranks(_ranks_mix_reductions, 2):
        assert message == "loss_metric: ranks mixed sum- and mean-reduced losses in one window"


ACCEPTED = [
    (TrainMetric, "gradient_accumulation_steps, lr, step"),
    (LossMetric, "grad_norm, loss_reduction"),
    (Accuracy, "none"),
    (
        CompletionRewardMetric,
        "completion_lengths, completions, generate_time, generation_time, rewards, "
        "weight_sync_time",
    ),
    (DPOMetric, "ref_outputs"),
    (GRPOMetric, "advantages, old_logps"),
    (GSPOMetric, "advantages, old_logps"),
    (CISPOMetric, "advantages, old_logps"),
    (EmbeddingMetric, "grad_norm"),
]


@pytest.mark.parametrize(("cls", "accepted"), ACCEPTED, ids=[c.__name__ for c, _ in ACCEPTED])
def test_unknown_keyword_raises_naming_class_keyword_and_accepted(cls, accepted):
    metric = cls()
    with pytest.raises(InvalidValueError) as caught:
        metric.accumulate({}, {"loss": 1.0}, gradnorm=1.0)
    assert str(caught.value) == (
        f"{cls.__name__}.accumulate: unknown keyword 'gradnorm'; accepted: {accepted}"
    )
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidValueError, match=r"unknown keywords 'a', 'b'; accepted"):
        metric.accumulate([{}], [{}], b=1, a=2)  # checked before any micro-batch
    assert metric.calculate() == (
        {} if cls is not Accuracy else {"correct_tokens": 0.0, "total_tokens": 0.0}
    )
