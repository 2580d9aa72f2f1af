"""Router hooks: generic module/function hooks and transformers' Qwen3 MoE routers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from telemetry import stats_tracker
from telemetry.metrics.moe import MoEBalance
from telemetry.metrics.moe_hooks import hook_router, hook_transformers_moe, wrap_router
from telemetry.model.errors import InvalidValueError


def export(balance: MoEBalance):
    return stats_tracker.export_sources([balance])


def topk_counts(logits: np.ndarray, k: int) -> np.ndarray:
    """numpy reference: top-k of the router softmax per token, counted per expert."""
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    return np.bincount(chosen.reshape(-1), minlength=logits.shape[-1]).astype(float)


class TopKRouter(torch.nn.Module):
    def __init__(self, hidden: int, experts: int, k: int) -> None:
        super().__init__()
        self.num_experts, self.k = experts, k
        self.weight = torch.nn.Linear(hidden, experts, bias=False)

    def forward(self, x):
        logits = self.weight(x)
        scores, indices = logits.softmax(-1).topk(self.k, dim=-1)
        return logits, scores, indices


def test_generic_module_hook_counts_training_forwards_only():
    torch.manual_seed(0)
    balance = MoEBalance(register=False)
    routers = [TopKRouter(8, 5, 2) for _ in range(2)]
    hooks = hook_router(routers[0], balance, layer_id=0)
    hook_router(routers[1], balance, layer_id=3, hooks=hooks)
    assert hooks.layers == {0: "TopKRouter", 3: "TopKRouter"}
    x = torch.randn(11, 8)
    routers[0](x)  # not inside training(): an eval/reference forward
    expected = {0: np.zeros(5), 3: np.zeros(5)}
    with balance.training(), torch.no_grad():
        for micro in (x, torch.randn(4, 8)):
            for layer, router in zip((0, 3), routers):
                logits, _, _ = router(micro)
                expected[layer] += topk_counts(logits.numpy(), 2)
    stats = export(balance)
    for layer, counts in expected.items():
        got = [stats[f"moe_balance/layer_{layer}/expert_{e}/tokens"] for e in range(5)]
        assert got == counts.tolist()
        ratio = counts.max() / (counts.sum() / 5)
        assert stats[f"moe_balance/layer_{layer}/max_over_ideal"] == pytest.approx(ratio)
    hooks.remove()
    hooks.remove()
    with balance.training():
        routers[0](x)
    assert export(balance)["moe_balance/layer_0/max_over_ideal"] == 0.0  # removed: no counts


def test_wrapped_router_function_and_missing_expert_count():
    balance = MoEBalance(register=False)

    def route(x):
        return x.argmax(-1, keepdim=True)

    routed = wrap_router(route, balance, layer_id=2, num_experts=3)
    x = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [5.0, 0.0, 0.0]])
    with balance.training():
        assert routed(x).tolist() == [[1], [1], [0]]
    stats = export(balance)
    assert [stats[f"moe_balance/layer_2/expert_{e}/tokens"] for e in range(3)] == [1.0, 2.0, 0.0]
    assert stats["moe_balance/layer_2/max_over_ideal"] == pytest.approx(2 / (3 / 3))
    with pytest.raises(InvalidValueError, match="num_experts"):
        hook_router(torch.nn.Linear(2, 2), balance, layer_id=0)


def test_unsupported_router_gives_no_metrics_and_one_warning():
    balance = MoEBalance(register=False)
    gate = torch.nn.Linear(4, 3)  # returns logits only: no indices
    hooks = hook_router(gate, balance, layer_id=0, num_experts=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with balance.training():
            for _ in range(3):
                gate(torch.randn(2, 4))
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == [
        str(caught[0].message)
    ]
    assert "no MoE balance metrics" in str(caught[0].message)
    assert not hooks.active
    assert not export(balance)


def tiny_qwen3_moe():
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_experts=6,
        num_experts_per_tok=2, moe_intermediate_size=8, mlp_only_layers=[1],
    )  # fmt: skip
    return Qwen3MoeForCausalLM(config)


def test_transformers_qwen3_moe_hook_on_tiny_model():
    model = tiny_qwen3_moe()
    balance = MoEBalance(register=False)
    hooks = hook_transformers_moe(model, balance)
    assert sorted(hooks.layers) == [0, 2]  # layer 1 is a dense MLP
    assert hooks.layers[2] == "model.layers.2.mlp.gate"
    ids = torch.randint(0, 64, (2, 9))
    model.eval()
    with torch.no_grad():
        model(ids)  # eval forward: not counted
    model.train()
    with balance.training():
        out = model(ids, output_router_logits=True)
        out.logits.sum().backward()
    expected = [topk_counts(logits.detach().numpy(), 2) for logits in out.router_logits]
    stats = export(balance)
    for layer, counts in zip((0, 2), expected):
        got = [stats[f"moe_balance/layer_{layer}/expert_{e}/tokens"] for e in range(6)]
        assert got == counts.tolist()
        assert sum(got) == 2 * 9 * 2  # tokens (padding included) x top-k
        share = [stats[f"moe_balance/layer_{layer}/expert_{e}/load_percent"] for e in range(6)]
        assert share == pytest.approx((100 * counts / counts.sum()).tolist())
    assert not any(k.startswith("moe_balance/layer_1/") for k in stats)


def test_transformers_qwen3_5_moe_hook_on_tiny_model():
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    torch.manual_seed(0)
    config = Qwen3_5MoeTextConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=8, shared_expert_intermediate_size=8, full_attention_interval=2,
    )  # fmt: skip
    model = Qwen3_5MoeForCausalLM(config)
    balance = MoEBalance(register=False)
    hooks = hook_transformers_moe(model, balance)
    assert sorted(hooks.layers) == [0, 1]
    with balance.training():
        out = model(torch.randint(0, 64, (1, 7)), output_router_logits=True)
    stats = export(balance)
    for layer, logits in enumerate(out.router_logits):
        counts = topk_counts(logits.detach().numpy(), 2)
        got = [stats[f"moe_balance/layer_{layer}/expert_{e}/tokens"] for e in range(4)]
        assert got == counts.tolist()


def test_model_without_supported_router_warns_once():
    balance = MoEBalance(register=False)
    with pytest.warns(RuntimeWarning, match="no supported router") as caught:
        hooks = hook_transformers_moe(torch.nn.Sequential(torch.nn.Linear(2, 2)), balance)
    assert len(caught) == 1 and hooks.layers == {}
