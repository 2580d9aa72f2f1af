"""``rltel demo``: a real multi-rank RL run through the whole pipeline, embedded default.

Two (or more) gloo ranks train a tiny mixture-of-experts language model with a
GRPO-style clipped objective on a toy task (reward: the share of even tokens a
sequence generates). Every step records what an AReaL trainer records — PPO stats,
train/infer logprob diagnostics, staleness, advantage fractions, rollout rewards,
timings, throughput with estimated FLOPs and MoE expert balance, and every fourth step
an evaluation (``eval-rollout/reward``, scheduled by the Evaluator) — reduces it across
the ranks in one coalesced reduction, and rank 0 commits it to the StatsLogger, whose
in-process sinks write the console table, a Prometheus endpoint, W&B (offline),
SwanLab (offline) and TensorBoard. At the end rank 0 scrapes its own endpoint and
prints where every output went.
"""

from __future__ import annotations

import contextlib
import copy
import os
import urllib.request
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from telemetry.demo_cli import PROMETHEUS_HOST, DemoOptions

VOCAB, HIDDEN, EXPERTS, TOP_K, LAYERS = 32, 32, 8, 2, 2
PROMPT_LEN, GEN_LEN, BATCH = 4, 12, 8
MODEL_TYPE = "rltel_demo_moe"
# MFU needs a peak FLOP/s per device; each demo rank is one CPU core (one torch thread),
# and CPUs are not in telemetry.metrics.peak_flops. This is a stated, not measured, fp32
# peak of one x86 server core: 2 FMA pipes x 8 fp32 lanes (AVX2) x 2 FLOPs per FMA
# x ~3 GHz = 96 GFLOP/s, rounded to 1e11. On a GPU, TrainPerf picks the device's figure.
DEMO_PEAK_FLOPS_PER_CORE = 1e11


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
def generate(behavior: nn.Module, generator: torch.Generator) -> torch.Tensor:
    tokens = torch.randint(0, VOCAB, (BATCH, PROMPT_LEN), generator=generator)
    for _ in range(GEN_LEN):
        probs = behavior(tokens)[:, -1].exp()
        tokens = torch.cat([tokens, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return tokens


def train_rank(rank: int, world: int, options: DemoOptions, port: int) -> None:
    """One rank of the demo (a module-level function so that spawn can pickle it)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        _train(rank, world, options)
    finally:
        dist.destroy_process_group()


def _train(rank: int, world: int, options: DemoOptions) -> None:
    from telemetry import StatsLogger, stats_tracker
    from telemetry.evaluator import Evaluator
    from telemetry.metrics import (
        MoEBalance,
        TrainPerf,
        get_flops_estimator,
        hook_router,
        record_advantage_fractions,
        record_train_infer,
        record_version_stats,
        register_flops_estimator,
    )

    torch.manual_seed(1234 + rank)
    generator = torch.Generator().manual_seed(99 + rank)
    model = TinyMoELM()
    for param in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(param.data, src=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    register_flops_estimator(MODEL_TYPE, demo_flops_factory)
    config = {
        "model_type": MODEL_TYPE,
        "hidden": HIDDEN,
        "layers": LAYERS,
        "experts": EXPERTS,
        "top_k": TOP_K,
        "vocab": VOCAB,
    }
    perf = TrainPerf(get_flops_estimator(config), peak_flops_per_device=DEMO_PEAK_FLOPS_PER_CORE)
    balance = MoEBalance()
    for layer_id, layer in enumerate(model.layers):
        hook_router(layer.router, balance, layer_id, num_experts=EXPERTS)
    logger = StatsLogger(_logger_config(options)) if rank == 0 else None
    behavior, behavior_version = copy.deepcopy(model), 0
    evaluator = Evaluator({"freq_steps": 4, "eval_before_train": True}, options.steps)

    def evaluate() -> None:  # the current policy on held-out prompts (eval-rollout stream)
        with torch.no_grad():
            tokens = generate(model, torch.Generator().manual_seed(7 + rank))
        for value in (tokens[:, PROMPT_LEN:] % 2 == 0).float().mean(1).tolist():
            stats_tracker.get("eval-rollout").scalar(reward=value)

    evaluator.before_train(evaluate)

    for step in range(options.steps):
        with stats_tracker.record_timing("rollout"):
            tokens = generate(behavior, generator)
            with torch.no_grad():
                rollout_logp = token_logp(behavior, tokens)
                rollout_logp = rollout_logp + 0.01 * torch.randn(
                    rollout_logp.shape, generator=generator
                )  # inference-engine numerics differ slightly from the trainer's
        generated = tokens[:, PROMPT_LEN:]
        reward = (generated % 2 == 0).float().mean(1)
        for value in reward.tolist():
            stats_tracker.get("rollout").scalar(reward=value)
        advantages = ((reward - reward.mean()) / (reward.std() + 1e-6)).unsqueeze(1)
        advantages = advantages.expand(-1, GEN_LEN).contiguous()
        gen_mask = torch.ones(BATCH, GEN_LEN, dtype=torch.bool)
        gen_mask[:, GEN_LEN - 1 - (step % 3) :] = step % 2 == 0  # some padded tails
        attention_mask = torch.cat([torch.ones(BATCH, PROMPT_LEN, dtype=torch.bool), gen_mask], 1)

        with perf.measure(attention_mask), balance.training():
            optimizer.zero_grad()
            trainer_logp = token_logp(model, tokens)
            ratio = (trainer_logp - rollout_logp).exp()
            clipped = ratio.clamp(0.8, 1.2)
            per_token = -torch.minimum(ratio * advantages, clipped * advantages)
            loss = (per_token * gen_mask).sum() / gen_mask.sum().clamp(min=1)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()

        with stats_tracker.scope("ppo_actor"):
            record_train_infer(trainer_logp.detach(), rollout_logp, gen_mask)
            record_advantage_fractions(advantages, gen_mask)
            with stats_tracker.scope("update"):
                stats_tracker.denominator(
                    n_valid_tokens=gen_mask, n_seqs=torch.ones(BATCH, dtype=torch.bool)
                )
                stats_tracker.stat(
                    loss=per_token.detach(),
                    importance_weight=ratio.detach(),
                    clip_ratio=(ratio.detach() != clipped.detach()).float(),
                    denominator="n_valid_tokens",
                )
                stats_tracker.stat(task_reward=reward, denominator="n_seqs")
                versions = torch.full((BATCH, GEN_LEN), behavior_version)
                record_version_stats(versions, step, gen_mask)
                stats_tracker.scalar(grad_norm=grad_norm, lr=optimizer.param_groups[0]["lr"])

        evaluator.evaluate(evaluate, epoch=0, epoch_step=step, global_step=step)
        stats = stats_tracker.export_all(reduce_group=dist.group.WORLD)
        if logger is not None:
            logger.commit(epoch=0, epoch_step=step, global_step=step, data=stats)
        if step % 2 == 1:  # rollout runs one version behind, refreshed every other step
            behavior, behavior_version = copy.deepcopy(model), step
    dist.barrier()
    if logger is not None:
        _report(logger, options)


def _logger_config(options: DemoOptions) -> dict:
    return {
        "experiment_name": "rltel-demo",
        "trial_name": "trial0",
        "fileroot": options.fileroot,
        "wandb": {"mode": "offline", "project": "rltel-demo"},
        "swanlab": {"mode": "offline", "project": "rltel-demo"},
        "tensorboard": {"path": str(Path(options.fileroot) / "rltel-demo" / "trial0" / "tb")},
        "prometheus": {"enabled": True, "host": PROMETHEUS_HOST, "port": options.prometheus_port},
        "console": {"enabled": True},
    }


def _report(logger, options: DemoOptions) -> None:
    import time

    logger.fanout.force_flush(30.0)
    url = next(q.sink.url for q in logger.fanout.queued if q.sink.name == "prometheus")
    body = urllib.request.urlopen(url, timeout=10).read().decode()
    wanted = (
        "train_perf_tokens_per_second{",
        "moe_balance_max_over_ideal_ratio{",
        "ppo_actor_train_infer_kl_k3_avg{",
    )
    print(f"\nPrometheus endpoint {url} serves, among others:")
    for line in body.splitlines():
        if line.startswith(wanted):
            print("  " + line)
    if options.serve_seconds > 0:
        print(f"serving {url} for {options.serve_seconds:.0f} s (Ctrl-C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(options.serve_seconds)
    logger.close()
    run_dir = logger.config.run_dir
    print(f"\nrun files under {run_dir}:")
    for path in sorted(run_dir.iterdir()):
        print(f"  {path}")


def run_demo(options: DemoOptions) -> None:
    """Spawn ``options.ranks`` gloo ranks and run the demo on them."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(train_rank, args=(options.ranks, options, port), nprocs=options.ranks)
