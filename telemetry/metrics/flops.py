"""Training FLOPs estimators per model architecture, looked up by ``model_type``.

A factory takes a model config and returns ``estimate(sequence_length) -> float``, the
total training FLOPs (forward + backward) of ONE sequence. Causal attention is quadratic
in the length, so a packed batch is ``estimate_batch_flops(estimate, lengths)``: the sum
of per-sequence estimates, never the estimate of the summed length.

Counting rules of the built-in estimators (``qwen3_moe``, ``qwen3_5_moe``,
``qwen3_5_moe_text``): one multiply-add is 2 FLOPs; training is 3x the forward (the
backward is about twice the forward). Counted per token: attention projections (with the
Qwen3.5 output gate doubling ``q_proj``), router, the ``num_experts_per_tok`` activated
expert SwiGLU projections, the shared expert and its gate, dense MLP layers if any, the
LM head; per sequence and full-attention layer the causal attention core
``2 * query_heads * head_dim * L * (L + 1)``. GatedDeltaNet layers count their input
and output projections, the depthwise convolution (``conv_dim * kernel`` multiply-adds
per token) and ``3 * key_head_dim * value_head_dim`` multiply-adds per value head and
token for the state recursion (predict, update, read out). Not counted: activation
recomputation, the optimizer, element-wise ops, softmax and norms, the embedding lookup,
a vision encoder, extra MTP layers.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from telemetry.model.errors import ConfigError, InvalidValueError

FlopsEstimator = Callable[[int], float]
FlopsFactory = Callable[[Any], FlopsEstimator]

_REGISTRY: dict[str, FlopsFactory] = {}
_REQUIRED = object()


def register_flops_estimator(model_type: str, factory: FlopsFactory) -> None:
    """Register ``factory`` for configs whose ``model_type`` is ``model_type``.

    A registration with the name of a built-in (or earlier) one replaces it. Register on
    every training process before building the estimator.

    Args:
        model_type: the config's ``model_type`` (of its ``text_config`` when it has one).
        factory: ``factory(config) -> estimate(sequence_length) -> training FLOPs``.

    Raises:
        ConfigError: ``model_type`` is not a non-empty string or ``factory`` not callable.
    """
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(
            f"flops estimator model_type must be a non-empty string, got {model_type!r}"
        )
    if not callable(factory):
        raise ConfigError(f"flops estimator factory for {model_type!r} is not callable")
    _REGISTRY[model_type] = factory


def get_flops_estimator(config: Any) -> FlopsEstimator | None:
    """The training-FLOPs estimator for ``config``, or None if its architecture has none.

    Args:
        config: a config object (e.g. a ``transformers`` config), a dict, or a local model
            directory (or ``config.json`` path). A ``text_config`` is used when present;
            its ``model_type`` is looked up first, then the outer one.

    Returns:
        ``estimate(sequence_length) -> float`` that raises :class:`InvalidValueError` for a
        negative, boolean or non-integer length; None when no factory is registered.

    Raises:
        ConfigError: the directory has no ``config.json``, or a field the factory needs
            is missing or invalid.
    """
    model_types, text = _resolve(config)
    for model_type in model_types:
        factory = _REGISTRY.get(model_type)
        if factory is not None:
            return _checked(factory(text), model_type)
    return None


def estimate_batch_flops(estimate: FlopsEstimator, sequence_lengths: Iterable[int]) -> float:
    """Training FLOPs of a (packed) batch: the sum of per-sequence estimates."""
    return float(sum(estimate(length) for length in sequence_lengths))


def _checked(estimate: FlopsEstimator, model_type: str) -> FlopsEstimator:
    def checked(sequence_length: int) -> float:
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, numbers.Integral):
            raise InvalidValueError(
                f"flops estimate for {model_type!r}: sequence length must be an int, "
                f"got {type(sequence_length).__name__}"
            )
        if sequence_length < 0:
            raise InvalidValueError(
                f"flops estimate for {model_type!r}: sequence length {sequence_length} is negative"
            )
        return float(estimate(int(sequence_length)))

    return checked


def _namespace(value: Any) -> Any:
    if isinstance(value, Mapping):
        return SimpleNamespace(**{str(k): _namespace(v) for k, v in value.items()})
    return value


def _resolve(config: Any) -> tuple[list[str], Any]:
    if isinstance(config, (str, os.PathLike)):
        config = _load_config_file(Path(config))
    config = _namespace(config)
    outer_type = getattr(config, "model_type", None)
    text = _namespace(getattr(config, "text_config", None))
    if text is None:
        return ([outer_type] if outer_type else []), config
    types = [t for t in (getattr(text, "model_type", None), outer_type) if t]
    return list(dict.fromkeys(types)), text


def _load_config_file(path: Path) -> dict:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"no model config at {str(file)!r}")
    with file.open(encoding="utf-8") as handle:
        return json.load(handle)


def _field(config: Any, name: str, default: Any = _REQUIRED) -> Any:
    value = getattr(config, name, None)
    if value is None:
        if default is _REQUIRED:
            raise ConfigError(f"model config has no {name!r} (needed for the FLOPs estimate)")
        return default
    return value


def _int(config: Any, name: str, default: Any = _REQUIRED) -> int:
    value = _field(config, name, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ConfigError(f"model config {name!r} must be a non-negative int, got {value!r}")
    return int(value)


def _training_estimate(linear_macs_per_token: int, attention_coeff: int) -> FlopsEstimator:
    """``3 * (2 * macs * L + attention_coeff * L * (L + 1))``, exact in integers."""

    def estimate(length: int) -> float:
        forward = 2 * linear_macs_per_token * length + attention_coeff * length * (length + 1)
        return float(3 * forward)

    return estimate


def _moe_macs(config: Any, hidden: int, layer: int) -> int:
    """Multiply-adds per token of layer ``layer``'s feed-forward block."""
    experts = _int(config, "num_experts", 0)
    sparse_step = _int(config, "decoder_sparse_step", 1) or 1
    dense_layers = set(_field(config, "mlp_only_layers", []))
    if layer in dense_layers or experts == 0 or (layer + 1) % sparse_step != 0:
        return 3 * hidden * _int(config, "intermediate_size")
    top_k = _int(config, "num_experts_per_tok")
    macs = hidden * experts + top_k * 3 * hidden * _int(config, "moe_intermediate_size")
    shared = _int(config, "shared_expert_intermediate_size", 0)
    if shared:
        macs += 3 * hidden * shared + hidden  # shared expert SwiGLU and its scalar gate
    return macs


def _attention_shape(config: Any) -> tuple[int, int, int, int]:
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    if heads == 0:
        raise ConfigError("model config 'num_attention_heads' must be positive")
    kv_heads = _int(config, "num_key_value_heads", heads)
    head_dim = _int(config, "head_dim", hidden // heads)
    return hidden, heads, kv_heads, head_dim


def qwen3_moe_factory(config: Any) -> FlopsEstimator:
    """Qwen3-MoE (e.g. Qwen3-30B-A3B): full attention in every layer, routed experts."""
    hidden, heads, kv_heads, head_dim = _attention_shape(config)
    layers = _int(config, "num_hidden_layers")
    attention_proj = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    macs = hidden * _int(config, "vocab_size")
    macs += sum(attention_proj + _moe_macs(config, hidden, i) for i in range(layers))
    return _training_estimate(macs, layers * 2 * heads * head_dim)


def _layer_types(config: Any, layers: int) -> list[str]:
    types = getattr(config, "layer_types", None)
    if types is None:
        interval = _int(config, "full_attention_interval", 4)
        if interval == 0:
            raise ConfigError("model config 'full_attention_interval' must be positive")
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(layers)
        ]
    types = list(types)
    unknown = sorted(set(types) - {"full_attention", "linear_attention"})
    if len(types) != layers or unknown:
        raise ConfigError(
            f"model config 'layer_types' must list {layers} entries of full_attention/"
            f"linear_attention, got {len(types)} (unknown: {unknown})"
        )
    return types


def qwen3_5_moe_factory(config: Any) -> FlopsEstimator:
    """Qwen3.5-MoE (e.g. Qwen3.5-35B-A3B): gated full attention beside GatedDeltaNet layers."""
    hidden, heads, kv_heads, head_dim = _attention_shape(config)
    layers = _int(config, "num_hidden_layers")
    gate = 2 if _field(config, "attn_output_gate", True) else 1
    full_proj = hidden * heads * head_dim * (gate + 1) + 2 * hidden * kv_heads * head_dim
    key_heads = _int(config, "linear_num_key_heads")
    value_heads = _int(config, "linear_num_value_heads")
    key_dim = key_heads * _int(config, "linear_key_head_dim")
    value_dim = value_heads * _int(config, "linear_value_head_dim")
    conv_dim = 2 * key_dim + value_dim
    linear_layer = (
        hidden * (conv_dim + value_dim + 2 * value_heads)  # in_proj_qkv, _z, _b, _a
        + value_dim * hidden  # out_proj
        + conv_dim * _int(config, "linear_conv_kernel_dim")  # depthwise causal conv
        + 3
        * value_heads
        * _int(config, "linear_key_head_dim")
        * _int(config, "linear_value_head_dim")  # state recursion: predict, update, read out
    )
    types = _layer_types(config, layers)
    macs = hidden * _int(config, "vocab_size")
    for i, kind in enumerate(types):
        macs += (full_proj if kind == "full_attention" else linear_layer) + _moe_macs(
            config, hidden, i
        )
    full_layers = types.count("full_attention")
    return _training_estimate(macs, full_layers * 2 * heads * head_dim)


register_flops_estimator("qwen3_moe", qwen3_moe_factory)
register_flops_estimator("qwen3_5_moe", qwen3_5_moe_factory)
register_flops_estimator("qwen3_5_moe_text", qwen3_5_moe_factory)
