"""The demo's policy: a tiny mixture-of-experts language model, its sampler and its FLOPs.

Shared by the trainer ranks (:mod:`rltel.demo`) and the rollout workers
(:mod:`rltel.demo.rollout`). The toy task rewards the share of even tokens a sequence
generates.
"""

from __future__ import annotations

import torch
from torch import nn

VOCAB, HIDDEN, EXPERTS, TOP_K, LAYERS = 32, 32, 8, 2, 2
PROMPT_LEN, GEN_LEN, BATCH = 4, 12, 8
MODEL_TYPE = "rltel_demo_moe"
# MFU needs a peak FLOP/s per device; each demo rank is one CPU core (one torch thread),
# and CPUs are not in telemetry.metrics.peak_flops. This is a stated, not measured, fp32
# peak of one x86 server core: 2 FMA pipes x 8 fp32 lanes (AVX2) x 2 FLOPs per FMA
# x ~3 GHz = 96 GFLOP/s, rounded to 1e11. On a GPU, TrainPerf picks the device's figure.
DEMO_PEAK_FLOPS_PER_CORE = 1e11
MODEL_CONFIG = {
    "model_type": MODEL_TYPE,
    "hidden": HIDDEN,
    "layers": LAYERS,
    "experts": EXPERTS,
    "top_k": TOP_K,
    "vocab": VOCAB,
}


class TopKRouter(nn.Module):
    """A top-k softmax router: returns (weights, expert indices) like MoE routers do."""

    def __init__(self, hidden: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, indices = torch.topk(self.gate(x).softmax(-1), self.top_k, dim=-1)
        return weights / weights.sum(-1, keepdim=True), indices


class MoELayer(nn.Module):
    """Routed feed-forward experts with a residual connection."""

    def __init__(self) -> None:
        super().__init__()
        self.router = TopKRouter(HIDDEN, EXPERTS, TOP_K)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.GELU(), nn.Linear(2 * HIDDEN, HIDDEN))
            for _ in range(EXPERTS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, indices = self.router(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            chosen = (indices == e).to(x.dtype)  # [..., top_k]
            gate = (weights * chosen).sum(-1, keepdim=True)
            out = out + gate * expert(x)
        return x + out


class TinyMoELM(nn.Module):
    """Embedding, causal mixing by cumulative mean, MoE layers, LM head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(MoELayer() for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        positions = torch.arange(1, tokens.shape[1] + 1, device=tokens.device).view(1, -1, 1)
        h = h.cumsum(1) / positions
        for layer in self.layers:
            h = layer(h)
        return self.head(h).log_softmax(-1)


def demo_flops_factory(config):
    """Training FLOPs of the tiny model: 6 x active parameters per token (no attention)."""
    per_expert = 2 * config.hidden * 2 * config.hidden
    active = config.layers * (config.top_k * per_expert + config.hidden * config.experts)
    active += 2 * config.hidden * config.vocab

    def training_flops(sequence_length: int) -> float:
        return float(6 * active * sequence_length)

    return training_flops


def token_logp(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of each generated token, aligned with the generated positions."""
    logp = model(tokens[:, :-1])
    picked = logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    return picked[:, PROMPT_LEN - 1 :]


@torch.no_grad()
def generate(behavior: nn.Module, generator: torch.Generator, batch: int = BATCH) -> torch.Tensor:
    """``batch`` random prompts continued by sampling ``GEN_LEN`` tokens from ``behavior``."""
    tokens = torch.randint(0, VOCAB, (batch, PROMPT_LEN), generator=generator)
    for _ in range(GEN_LEN):
        probs = behavior(tokens)[:, -1].exp()
        tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return tokens


@torch.no_grad()
def rollout_logp(behavior: nn.Module, tokens: torch.Tensor, generator: torch.Generator):
    """The behavior policy's token logprobs as an inference engine reports them.

    Inference-engine numerics differ slightly from the trainer's: a little noise is added.
    """
    logp = token_logp(behavior, tokens)
    return logp + 0.01 * torch.randn(logp.shape, generator=generator)


def even_reward(tokens: torch.Tensor) -> torch.Tensor:
    """The toy task's reward per sequence: the share of even generated tokens."""
    return (tokens[:, PROMPT_LEN:] % 2 == 0).float().mean(1)
