"""MoE balance: known routings, accumulation over micro-batches and gloo ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from distributed import run_ranks
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from telemetry import stats_tracker
from telemetry.metrics.moe import MoEBalance
from telemetry.metrics.moe_hooks import hook_router
from telemetry.model.errors import InvalidValueError, KeyMismatchError
from telemetry.model.snapshot import Gauge


def reference(indices: list[np.ndarray], experts: int) -> tuple[np.ndarray, np.ndarray, float]:
    """numpy: counts, load percent and max/ideal of the concatenated valid indices."""
    flat = np.concatenate([np.asarray(i).reshape(-1) for i in indices]) if indices else np.zeros(0)
    flat = flat[(flat >= 0) & (flat < experts)].astype(np.int64)
    counts = np.bincount(flat, minlength=experts).astype(float)
    total = counts.sum()
    if total == 0:
        return counts, np.zeros(experts), 0.0
    return counts, 100 * counts / total, counts.max() / (total / experts)


def check_layer(stats, layer: int, indices: list[np.ndarray], experts: int) -> None:
    counts, percent, ratio = reference(indices, experts)
    for e in range(experts):
        assert stats[f"moe_balance/layer_{layer}/expert_{e}/tokens"] == counts[e]
        assert stats[f"moe_balance/layer_{layer}/expert_{e}/load_percent"] == pytest.approx(
            percent[e]
        )
    assert stats[f"moe_balance/layer_{layer}/max_over_ideal"] == pytest.approx(ratio)
    assert f"moe_balance/layer_{layer}/expert_{experts}/tokens" not in stats


def export(balance: MoEBalance, reset: bool = True):
    return stats_tracker.export_sources([balance], reset=reset)


def test_known_routings_balanced_all_to_one_and_empty_layer():
    balance = MoEBalance(register=False)
    balanced = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]])
    one = torch.full((6, 2), 2)
    with balance.training():
        balance.record(0, balanced, 4)
        balance.record(1, one, 4)
        balance.record(2, torch.zeros(0, 2, dtype=torch.int64), 8)  # no assignments
    balance.add_layer(3, 4)  # declared, never routed
    stats = export(balance)
    check_layer(stats, 0, [balanced.numpy()], 4)
    assert stats["moe_balance/layer_0/max_over_ideal"] == 1.0
    assert stats["moe_balance/layer_0/expert_3/load_percent"] == 25.0
    check_layer(stats, 1, [one.numpy()], 4)
    assert stats["moe_balance/layer_1/max_over_ideal"] == 4.0
    assert stats["moe_balance/layer_1/expert_2/load_percent"] == 100.0
    for layer, experts in ((2, 8), (3, 4)):
        check_layer(stats, layer, [], experts)
        assert stats[f"moe_balance/layer_{layer}/max_over_ideal"] == 0.0
    ratio = next(p for p in stats.points if p.key == "moe_balance/layer_1/max_over_ideal")
    assert isinstance(ratio, Gauge) and ratio.attributes == (("layer", 1),)
    assert ratio.metric == "moe_balance/max_over_ideal"
    share = next(p for p in stats.points if p.key == "moe_balance/layer_1/expert_2/load_percent")
    assert share.attributes == (("layer", 1), ("expert", 2))


def test_micro_batches_accumulate_drops_excluded_and_window_resets():
    balance = MoEBalance(register=False)
    rng = np.random.default_rng(0)
    batches = [rng.integers(-1, 9, size=(int(n), 2)) for n in (5, 17, 3)]  # -1 and 8: drops
    with balance.training():
        for b in batches:
            balance.record(7, torch.from_numpy(b), 8)
    check_layer(export(balance, reset=False), 7, batches, 8)
    check_layer(export(balance), 7, batches, 8)
    check_layer(export(balance), 7, [], 8)  # new window: declared layer reports 0


class Router(torch.nn.Module):
    """Top-1 of 3 experts; ``balance`` set: records explicitly in its forward."""

    def __init__(self, balance: MoEBalance | None = None) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)
        self.balance = balance
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        logits = self.proj(x).tanh()  # saves an intermediate: recomputed in backward
        if self.balance is not None:
            self.balance.record(0, logits.topk(1, dim=-1).indices, 3)
        return logits


def run_forwards(router: Router, balance: MoEBalance, x: torch.Tensor) -> None:
    """One eval forward outside training(), two checkpointed training forwards (each
    recomputed in backward), one training forward under no_grad: 6 forwards."""
    with torch.no_grad():
        router(x)
    with balance.training():
        for reentrant in (True, False):
            out = checkpoint(router, x, use_reentrant=reentrant)
            out.sum().backward()
    with balance.training(), torch.no_grad():
        router(x)
    assert router.calls == 1 + 2 * 2 + 1


def routed_tokens(balance: MoEBalance) -> float:
    stats = export(balance)
    return sum(stats[f"moe_balance/layer_0/expert_{e}/tokens"] for e in range(3))


def test_hooks_skip_eval_forwards_and_checkpoint_recomputation():
    balance = MoEBalance(register=False)
    router = Router()
    hook_router(
        router, balance, 0, num_experts=3, extract=lambda out: out.detach().topk(1, -1).indices
    )
    run_forwards(router, balance, torch.randn(5, 4, requires_grad=True))
    assert routed_tokens(balance) == 3 * 5  # the three training forwards, not 6
    assert not balance.counting


def test_explicit_record_counts_wherever_called():
    balance = MoEBalance(register=False)
    router = Router(balance)
    with set_checkpoint_early_stop(False):  # the recompute runs the whole forward
        run_forwards(router, balance, torch.randn(5, 4, requires_grad=True))
    assert routed_tokens(balance) == 6 * 5  # eval and recomputed forwards included
    balance.record(0, torch.tensor([[2], [2]]), 3)  # outside training(), outside a forward
    assert not balance.counting
    stats = export(balance)
    assert [stats[f"moe_balance/layer_0/expert_{e}/tokens"] for e in range(3)] == [0, 0, 2]
    assert stats["moe_balance/layer_0/max_over_ideal"] == 3.0


def test_bad_inputs_raise():
    balance = MoEBalance(register=False)
    with balance.training():
        with pytest.raises(InvalidValueError, match="integer"):
            balance.record(0, torch.tensor([0.5]), 4)
        with pytest.raises(InvalidValueError, match="layer_id"):
            balance.record(-1, torch.tensor([0]), 4)
        balance.record(1, torch.tensor([0]), 4)
        with pytest.raises(InvalidValueError, match="moe_balance/layer_1"):
            balance.record(1, torch.tensor([0]), 8)


def test_registered_source_in_export_all():
    balance = MoEBalance()
    try:
        with balance.training():
            balance.record(0, torch.tensor([[1, 1]]), 2)
        stats = stats_tracker.export_all()
        assert stats["moe_balance/layer_0/expert_1/tokens"] == 2.0
        assert stats["moe_balance/layer_0/max_over_ideal"] == 2.0
    finally:
        balance.close()


def rank_routing(rank: int, layer: int, micro: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + 10 * layer + micro)
    return rng.integers(0, 6, size=(int(rng.integers(1, 40)), 2))


RANK_LAYERS = {0: (0, 1), 1: (1, 2)}  # pipeline-like: ranks hold different layers


def _ranks_different_layers(rank: int, world: int) -> dict:
    balance = MoEBalance(register=False)
    with balance.training():
        for layer in RANK_LAYERS[rank]:
            for micro in range(3):
                balance.record(layer, torch.from_numpy(rank_routing(rank, layer, micro)), 6)
    return dict(stats_tracker.export_sources([balance], reduce_group=dist.group.WORLD))


def test_two_ranks_with_different_layers():
    results = run_ranks(_ranks_different_layers, 2)
    assert results[0] == results[1]
    for layer in (0, 1, 2):
        routed = [
            rank_routing(rank, layer, micro)
            for rank in (0, 1)
            if layer in RANK_LAYERS[rank]
            for micro in range(3)
        ]
        check_layer(results[0], layer, routed, 6)


def _ranks_disagree_on_experts(rank: int, world: int) -> str:
    balance = MoEBalance(register=False)
    with balance.training():
        balance.record(0, torch.tensor([0, 1]), 4 if rank == 0 else 8)
    try:
        stats_tracker.export_sources([balance], reduce_group=dist.group.WORLD)
    except KeyMismatchError as exc:
        return str(exc)
    return "no error"


def test_ranks_with_different_expert_counts_fail_naming_the_layer():
    messages = run_ranks(_ranks_disagree_on_experts, 2)
    assert all("moe_balance/layer_0" in m for m in messages)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_record_does_not_sync():
    balance = MoEBalance(register=False)
    indices = torch.randint(-1, 9, (4096, 8), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with balance.training():
            for _ in range(3):
                balance.record(0, indices, 8)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    check_layer(export(balance), 0, [indices.cpu().numpy()] * 3, 8)
