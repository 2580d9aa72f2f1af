"""TrainMetric, LossMetric and Accuracy against plain-Python references; base behaviour."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from telemetry import stats_tracker
from telemetry.metrics.twinkle import Accuracy, LossMetric, TrainMetric
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
