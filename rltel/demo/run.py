"""``rltel demo``: a real multi-rank RL run through the whole pipeline.

Two (or more) gloo ranks train a tiny mixture-of-experts language model
(:mod:`rltel.demo.model`) with a GRPO-style clipped objective on a toy task. Every step
records what an AReaL trainer records — PPO stats, train/infer logprob diagnostics,
staleness, advantage fractions, rollout rewards, timings, throughput with estimated FLOPs
and MoE expert balance, and every fourth step an evaluation (``eval-rollout/reward``,
scheduled by the Evaluator) — reduces it across the ranks in one coalesced reduction, and
rank 0 commits it to the StatsLogger.

- Embedded default: the StatsLogger's in-process sinks write a Prometheus endpoint, W&B
  (offline), SwanLab (offline), TensorBoard and Trackio (local); the ranks sample their own
  rollouts.
- ``--collector`` / ``--otlp-endpoint``: the StatsLogger sends over OTLP to a collector
  (started by :mod:`rltel.demo.collector`, or the given one), and separate rollout
  workers (:mod:`rltel.demo.rollout`) sample with the current policy and export their
  own streams, which the collector merges count-weighted.

The terminal shows a progress bar (:mod:`rltel.demo.progress`), or with ``--verbose``
the full table per step, and at the end how to look at the run.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from rltel.demo.files import RunFiles
from rltel.demo.hints import local_hints, print_hints
from rltel.demo.loopback import init_loopback_group
from rltel.demo.model import (
    DEMO_PEAK_FLOPS_PER_CORE,
    EXPERTS,
    GEN_LEN,
    MODEL_CONFIG,
    MODEL_TYPE,
    PROMPT_LEN,
    TinyMoELM,
    demo_flops_factory,
    even_reward,
    generate,
    rollout_logp,
    token_logp,
)
from rltel.demo.options import PROMETHEUS_HOST, DemoOptions
from rltel.demo.progress import StepProgress, show_endpoint
from rltel.demo.rollout import (
    RolloutLink,
    load_rollouts,
    log_rollout_samples,
    request_rollouts,
    wait_delivered,
)
from rltel.demo.tracing import TRACING, rank_tracing
from telemetry.config import TENSORBOARD_DIR

__all__ = ["DEMO_PEAK_FLOPS_PER_CORE", "DemoOptions", "train_rank"]

EXPERIMENT, TRIAL = "rltel-demo", "trial0"
RUN = f"{EXPERIMENT}_{TRIAL}"  # the collector's run label
STOP_TIMEOUT_S = 10.0
UP_NOTE = "(up while the demo runs; --serve-seconds keeps it up)"


def train_rank(
    rank: int,
    world: int,
    options: DemoOptions,
    init_method: str,
    endpoint: str | None = None,
    link: RolloutLink | None = None,
) -> None:
    """One rank of the demo (a module-level function so that spawn can pickle it); the
    ranks meet at ``init_method`` (:func:`~rltel.demo.loopback.rendezvous`)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    init_loopback_group(rank, world, init_method)
    try:
        _train(rank, world, options, endpoint, link)
    finally:
        dist.destroy_process_group()


def _train(
    rank: int, world: int, options: DemoOptions, endpoint: str | None, link: RolloutLink | None
) -> None:
    from rltel.logger import StatsLogger
    from telemetry import perf_tracer, stats_tracker
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
    from telemetry.metrics.evaluator import Evaluator

    torch.manual_seed(1234 + rank)
    generator = torch.Generator().manual_seed(99 + rank)
    model = TinyMoELM()
    for param in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(param.data, src=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    register_flops_estimator(MODEL_TYPE, demo_flops_factory)
    perf = TrainPerf(
        get_flops_estimator(MODEL_CONFIG), peak_flops_per_device=DEMO_PEAK_FLOPS_PER_CORE
    )
    balance = MoEBalance()
    for layer_id, layer in enumerate(model.layers):
        hook_router(layer.router, balance, layer_id, num_experts=EXPERTS)
    logger = progress = files = None
    if rank == 0:
        files = RunFiles(Path(options.fileroot) / EXPERIMENT / TRIAL)
        logger = StatsLogger(_logger_config(options, endpoint), sinks=_extra_sinks(options))
        progress = StepProgress(options.steps, enabled=not options.verbose)
    behavior, behavior_version = copy.deepcopy(model), 0
    evaluator = Evaluator({"freq_steps": 4, "eval_before_train": True}, options.steps)

    def evaluate() -> None:  # the current policy on held-out prompts (eval-rollout stream)
        with torch.no_grad():
            tokens = generate(model, torch.Generator().manual_seed(7 + rank))
        for value in even_reward(tokens).tolist():
            stats_tracker.get("eval-rollout").scalar(reward=value)
        if logger is not None:  # rank 0's generations, shown beside the metrics
            log_rollout_samples(tokens, even_reward(tokens), "eval-rollout")

    evaluator.before_train(evaluate)

    run_dir = Path(options.fileroot) / EXPERIMENT / TRIAL
    stop_tracing = rank_tracing(rank, (EXPERIMENT, TRIAL), run_dir, endpoint)
    for step in range(options.steps):
        with perf_tracer.trace_scope("train_step", args={"global_step": step}):
            with stats_tracker.record_timing("rollout"):
                if link is not None:  # the rollout workers sample with the current policy
                    if rank == 0:
                        request_rollouts(link, step, model)
                    dist.barrier()
                    tokens, old_logp, behavior_version = load_rollouts(link, step, rank, world)
                else:
                    tokens = generate(behavior, generator)
                    old_logp = rollout_logp(behavior, tokens, generator)
            reward = even_reward(tokens)
            if link is None:  # with workers, rollout/reward is theirs (merged by the collector)
                for value in reward.tolist():
                    stats_tracker.get("rollout").scalar(reward=value)
                if logger is not None:
                    log_rollout_samples(tokens, reward, "rollout")
            batch = tokens.shape[0]
            advantages = ((reward - reward.mean()) / (reward.std() + 1e-6)).unsqueeze(1)
            advantages = advantages.expand(-1, GEN_LEN).contiguous()
            gen_mask = torch.ones(batch, GEN_LEN, dtype=torch.bool)
            gen_mask[:, GEN_LEN - 1 - (step % 3) :] = step % 2 == 0  # some padded tails
            attention_mask = torch.cat(
                [torch.ones(batch, PROMPT_LEN, dtype=torch.bool), gen_mask], 1
            )

            with (
                perf_tracer.trace_scope("train", args={"global_step": step}),
                perf.measure(attention_mask),
                balance.training(),
            ):
                optimizer.zero_grad()
                trainer_logp = token_logp(model, tokens)
                ratio = (trainer_logp - old_logp).exp()
                clipped = ratio.clamp(0.8, 1.2)
                per_token = -torch.minimum(ratio * advantages, clipped * advantages)
                loss = (per_token * gen_mask).sum() / gen_mask.sum().clamp(min=1)
                loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()

            with stats_tracker.scope("ppo_actor"):
                record_train_infer(trainer_logp.detach(), old_logp, gen_mask)
                record_advantage_fractions(advantages, gen_mask)
                with stats_tracker.scope("update"):
                    stats_tracker.denominator(
                        n_valid_tokens=gen_mask, n_seqs=torch.ones(batch, dtype=torch.bool)
                    )
                    stats_tracker.stat(
                        loss=per_token.detach(),
                        importance_weight=ratio.detach(),
                        clip_ratio=(ratio.detach() != clipped.detach()).float(),
                        denominator="n_valid_tokens",
                    )
                    stats_tracker.stat(task_reward=reward, denominator="n_seqs")
                    versions = torch.full((batch, GEN_LEN), behavior_version)
                    record_version_stats(versions, step, gen_mask)
                    stats_tracker.scalar(grad_norm=grad_norm, lr=optimizer.param_groups[0]["lr"])

            evaluator.evaluate(evaluate, epoch=0, epoch_step=step, global_step=step)
            with perf_tracer.trace_scope("export", category="comm"):
                stats = stats_tracker.export_all(reduce_group=dist.group.WORLD)
            if logger is not None:
                logger.commit(epoch=0, epoch_step=step, global_step=step, data=stats)
                if link is not None:  # this step reaches the collector before the next rollouts
                    wait_delivered(logger)
                progress.update(step, stats)
            if link is None and step % 2 == 1:  # rollout one version behind, refreshed every 2nd
                behavior, behavior_version = copy.deepcopy(model), step
    stop_tracing()
    dist.barrier()
    if logger is not None:
        progress.close()
        if endpoint is None:
            _finish_embedded(logger, options, files)
        else:
            logger.close(30.0)  # the OTLP sink's queue drains; the main process reports


def _logger_config(options: DemoOptions, endpoint: str | None) -> dict:
    base = {
        "experiment_name": EXPERIMENT,
        "trial_name": TRIAL,
        "fileroot": options.fileroot,
        "tracing": TRACING,
    }
    if endpoint is not None:  # no in-process sinks: the collector fans out
        return {**base, "otlp": {"endpoint": endpoint}, "console": {"enabled": False}}
    run_dir = Path(options.fileroot) / EXPERIMENT / TRIAL
    return {
        **base,
        "wandb": {"mode": "offline", "project": EXPERIMENT},
        "swanlab": {"mode": "offline", "project": EXPERIMENT},
        "trackio": {"mode": "local", "project": EXPERIMENT},  # <run_dir>/trackio
        "tensorboard": {"path": str(run_dir / TENSORBOARD_DIR)},  # the collector's layout
        "prometheus": {"enabled": True, "host": PROMETHEUS_HOST, "port": options.prometheus_port},
        "console": {"enabled": options.verbose},
    }


def _extra_sinks(options: DemoOptions) -> list | None:
    """Over OTLP, ``--verbose`` keeps the table on this terminal (a display, not a store)."""
    if not (options.otlp and options.verbose):
        return None
    from exporters.console import ConsoleSink

    return [ConsoleSink()]


def _finish_embedded(logger, options: DemoOptions, files: RunFiles) -> None:
    """Rank 0, embedded: scrape its own endpoint, close the sinks, list files, hints."""
    logger.fanout.force_flush(30.0)
    url = logger.prometheus_url
    show_endpoint(url, options.serve_seconds)
    logger.close()
    files.show()
    print_hints(local_hints(files, f"{url} {UP_NOTE}"))
