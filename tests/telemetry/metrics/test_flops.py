"""FLOPs estimators against hand calculations from the public Qwen configs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from telemetry.metrics.flops import (
    estimate_batch_flops,
    get_flops_estimator,
    qwen3_moe_factory,
    register_flops_estimator,
)
from telemetry.model.errors import ConfigError, InvalidValueError

# config.json of Qwen/Qwen3-30B-A3B (public release).
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "vocab_size": 151936,
}

_LAYER_TYPES_35 = [
    "linear_attention",
    "linear_attention",
    "linear_attention",
    "full_attention",
] * 10

# config.json of Qwen/Qwen3.5-35B-A3B (public release; multimodal wrapper with a text config).
QWEN3_5_35B_A3B = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "image_token_id": 248056,
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "attention_bias": False,
        "attn_output_gate": True,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "layer_types": _LAYER_TYPES_35,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "moe_intermediate_size": 512,
        "mtp_num_hidden_layers": 1,
        "num_attention_heads": 16,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 40,
        "num_key_value_heads": 2,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "vocab_size": 248320,
    },
    "vision_config": {"model_type": "qwen3_5_moe_vision", "depth": 27, "hidden_size": 1152},
}

LENGTHS = [0, 1, 7, 1000, 4096, 32768]


def hand_qwen3_30b(length: int) -> int:
    """Activated weights of Qwen3-30B-A3B, listed matrix by matrix, times 6 per token."""
    attention = 2048 * 4096 + 2048 * 512 + 2048 * 512 + 4096 * 2048  # q, k, v, o
    router = 2048 * 128
    experts = 8 * (2048 * 768 + 2048 * 768 + 768 * 2048)  # gate, up, down of 8 experts
    lm_head = 2048 * 151936
    active = 48 * (attention + router + experts) + lm_head
    assert active == 3_041_656_832
    # causal QK^T and AV: L(L+1)/2 query-key pairs, 128 multiply-adds each, 32 heads, twice
    attention_core = 48 * 32 * 2 * (length * (length + 1) // 2) * 128 * 2
    return 3 * (2 * active * length + attention_core)


def hand_qwen3_5_35b(length: int) -> int:
    """Qwen3.5-35B-A3B: 10 gated full-attention and 30 GatedDeltaNet layers, 40 MoE blocks."""
    full = 2048 * (2 * 16 * 256) + 2 * 2048 * (2 * 256) + (16 * 256) * 2048  # q+gate, k, v, o
    key_dim, value_dim = 16 * 128, 32 * 128
    gdn = (
        2048 * (key_dim + key_dim + value_dim)  # in_proj_qkv
        + 2048 * value_dim  # in_proj_z
        + 2048 * 32 * 2  # in_proj_b, in_proj_a
        + value_dim * 2048  # out_proj
        + (2 * key_dim + value_dim) * 4  # depthwise conv, kernel 4
        + 32 * 3 * (128 * 128)  # recursion per value head
    )
    moe = 2048 * 256 + 8 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048  # router, experts, shared + gate
    lm_head = 2048 * 248320
    macs = 10 * full + 30 * gdn + 40 * moe + lm_head
    assert macs == 2_993_438_720
    attention_core = 10 * 16 * 2 * (length * (length + 1) // 2) * 256 * 2
    return 3 * (2 * macs * length + attention_core)


@pytest.mark.parametrize("length", LENGTHS)
def test_qwen3_30b_a3b_matches_hand_calculation(length):
    estimate = get_flops_estimator(QWEN3_30B_A3B)
    assert estimate(length) == float(hand_qwen3_30b(length))


@pytest.mark.parametrize("length", LENGTHS)
def test_qwen3_5_35b_a3b_matches_hand_calculation(length):
    estimate = get_flops_estimator(QWEN3_5_35B_A3B)
    assert estimate(length) == float(hand_qwen3_5_35b(length))


def test_qwen3_5_text_config_alone_and_derived_layer_types():
    text = dict(QWEN3_5_35B_A3B["text_config"])
    assert get_flops_estimator(text)(4096) == float(hand_qwen3_5_35b(4096))
    del text["layer_types"]  # derived from full_attention_interval = 4
    assert get_flops_estimator(text)(4096) == float(hand_qwen3_5_35b(4096))
    text["layer_types"] = _LAYER_TYPES_35[:-1]
    with pytest.raises(ConfigError, match="layer_types"):
        get_flops_estimator(text)


def test_transformers_config_objects():
    from transformers import Qwen3_5MoeConfig, Qwen3MoeConfig

    fields = {k: v for k, v in QWEN3_30B_A3B.items() if k not in ("architectures", "model_type")}
    assert get_flops_estimator(Qwen3MoeConfig(**fields))(2048) == float(hand_qwen3_30b(2048))
    # transformers' defaults are the Qwen3.5-35B-A3B shape; the text config is read.
    assert get_flops_estimator(Qwen3_5MoeConfig())(2048) == float(hand_qwen3_5_35b(2048))


def test_packed_batch_is_sum_of_sequences():
    estimate = get_flops_estimator(QWEN3_30B_A3B)
    lengths = [100, 3000, 7]
    packed = estimate_batch_flops(estimate, lengths)
    assert packed == float(sum(hand_qwen3_30b(n) for n in lengths))
    whole = estimate(sum(lengths))
    # the total length over-counts attention across sequence boundaries
    cross_pairs = (sum(lengths) * (sum(lengths) + 1) - sum(n * (n + 1) for n in lengths)) // 2
    assert whole - packed == float(3 * 48 * 32 * 128 * 2 * 2 * cross_pairs)


def test_override_of_builtin_and_custom_type():
    def factory(config):
        active, layers = config.active_parameters, config.num_hidden_layers
        heads, head_dim = config.num_attention_heads, config.head_dim

        def total(length: int) -> float:
            return float(
                6 * active * length + 6 * layers * heads * head_dim * length * (length + 1)
            )

        return total

    custom = {"model_type": "my_model", "active_parameters": 10, "num_attention_heads": 2}
    custom.update(head_dim=4, num_hidden_layers=3)
    assert get_flops_estimator(custom) is None
    register_flops_estimator("my_model", factory)
    assert get_flops_estimator(custom)(5) == 6 * 10 * 5 + 6 * 3 * 2 * 4 * 5 * 6
    try:
        register_flops_estimator("qwen3_moe", lambda config: lambda length: 1.0 * length)
        assert get_flops_estimator(QWEN3_30B_A3B)(9) == 9.0
    finally:
        register_flops_estimator("qwen3_moe", qwen3_moe_factory)
    assert get_flops_estimator(QWEN3_30B_A3B)(9) == float(hand_qwen3_30b(9))
    with pytest.raises(ConfigError):
        register_flops_estimator("", factory)
    with pytest.raises(ConfigError):
        register_flops_estimator("x", 3)


def test_local_directory_and_config_path(tmp_path):
    model_dir = tmp_path / "checkpoint-step-17"  # directory name says nothing about the model
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(QWEN3_5_35B_A3B))
    expected = float(hand_qwen3_5_35b(777))
    assert get_flops_estimator(model_dir)(777) == expected
    assert get_flops_estimator(str(model_dir))(777) == expected
    assert get_flops_estimator(model_dir / "config.json")(777) == expected
    with pytest.raises(ConfigError, match="no model config"):
        get_flops_estimator(tmp_path / "missing")


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_invalid_lengths_raise(bad):
    estimate = get_flops_estimator(QWEN3_30B_A3B)
    with pytest.raises(InvalidValueError):
        estimate(bad)


def test_numpy_integer_length_and_missing_field():
    estimate = get_flops_estimator(QWEN3_30B_A3B)
    assert estimate(np.int64(64)) == float(hand_qwen3_30b(64))
    broken = {k: v for k, v in QWEN3_30B_A3B.items() if k != "moe_intermediate_size"}
    with pytest.raises(ConfigError, match="moe_intermediate_size"):
        get_flops_estimator(broken)
    assert get_flops_estimator({"model_type": "llama"}) is None
    assert get_flops_estimator({}) is None


def test_linear_part_matches_torch_flop_counter_on_tiny_qwen3_moe():
    """Independent check: count matmul FLOPs of a real forward of a tiny Qwen3-MoE."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1,
    )  # fmt: skip
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    model = Qwen3MoeForCausalLM(config).eval()
    length = 10
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 64, (1, length)))
    measured = counter.get_total_flops()
    # eager attention multiplies full L x L scores; the estimate counts the causal half
    layers, heads, head_dim = 2, 4, 8
    full_core = layers * 2 * (2 * heads * head_dim * length * length)  # QK^T and AV
    causal_core = layers * 2 * heads * head_dim * length * (length + 1)
    estimated_forward = get_flops_estimator(config)(length) / 3
    assert estimated_forward == measured - full_core + causal_core
