"""Rollout workers of ``rltel demo --collector`` / ``--otlp-endpoint``: separate processes.

Each step, trainer rank 0 saves the current policy's ``state_dict`` to a file and asks every
worker for rollouts; each worker loads that policy, samples its batch (worker ``w`` samples
``BATCH + 4 w`` sequences, so the workers' counts differ), records ``rollout/reward`` per
sequence and ``timeperf/generate``, commits them through its own StatsLogger
(``role="rollout"``) to the collector over OTLP, logs each sequence as a sample
(:func:`log_rollout_samples`), waits until they are exported, writes the
batch for the trainers, appends its count and reward sum to
``<run dir>/rollout-workers/worker-<w>.jsonl``, and reports back. Then the trainer ranks
train on the pooled batches (rank ``r`` takes rows ``r::world``) and rank 0 commits the
step, so the collector merges the workers count-weighted into that step.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import string
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

import torch

from rltel.demo.model import (
    BATCH,
    PROMPT_LEN,
    VOCAB,
    TinyMoELM,
    even_reward,
    generate,
    rollout_logp,
)
from rltel.demo.options import DemoOptions

EXPORT_WAIT_S = 30.0
REPLY_TIMEOUT_S = 600.0


TOKEN_TEXT = (string.ascii_lowercase + string.digits)[:VOCAB]
"""The toy vocabulary rendered as text: token ``t`` is ``TOKEN_TEXT[t]``."""


def log_rollout_samples(tokens: torch.Tensor, reward: torch.Tensor, stream: str) -> None:
    """Offer every sequence of a batch to ``stream``'s samples: prompt and completion as
    text (one character per token), reward and completion length as numbers."""
    from telemetry.samples import log_sample

    for row, value in zip(tokens.tolist(), reward.tolist(), strict=True):
        completion = row[PROMPT_LEN:]
        log_sample(
            stream,
            text={
                "prompt": "".join(TOKEN_TEXT[t] for t in row[:PROMPT_LEN]),
                "completion": "".join(TOKEN_TEXT[t] for t in completion),
            },
            numbers={"reward": value, "length": len(completion)},
        )


def worker_batch(worker: int) -> int:
    """Sequences worker ``worker`` samples per step."""
    return BATCH + 4 * worker


@dataclass(frozen=True)
class RolloutLink:
    """What the trainers and the workers share: a scratch directory and queues."""

    scratch: Path
    commands: tuple[Any, ...]  # one queue per worker: (step, policy version) or None
    replies: Any  # ("ok", worker, step) or ("error", worker, traceback)

    @property
    def policy_path(self) -> Path:
        return self.scratch / "policy.pt"

    def batch_path(self, step: int, worker: int) -> Path:
        return self.scratch / f"rollout-{step}-{worker}.pt"


def _save(obj: Any, path: Path) -> None:
    """``torch.save`` then rename: a reader never sees a partial file."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def request_rollouts(link: RolloutLink, step: int, model: torch.nn.Module) -> None:
    """Rank 0: publish the policy, ask every worker for step ``step``, wait for all.

    Raises:
        RuntimeError: a worker failed (its traceback) or did not answer in time.
    """
    _save(model.state_dict(), link.policy_path)
    for queue in link.commands:
        queue.put((step, step))
    for _ in link.commands:
        status, worker, detail = link.replies.get(timeout=REPLY_TIMEOUT_S)
        if status != "ok":
            raise RuntimeError(f"rollout worker {worker} failed:\n{detail}")


def load_rollouts(link: RolloutLink, step: int, rank: int, world: int):
    """This rank's share of the workers' batches: (tokens, rollout logp, policy version)."""
    parts = [
        torch.load(link.batch_path(step, w), weights_only=True) for w in range(len(link.commands))
    ]
    tokens = torch.cat([p["tokens"] for p in parts])[rank::world]
    logp = torch.cat([p["logp"] for p in parts])[rank::world]
    return tokens, logp, int(parts[0]["version"])


def rollout_worker(worker: int, options: DemoOptions, endpoint: str, link: RolloutLink) -> None:
    """A rollout worker process (module-level so that spawn can pickle it)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the demo's main process stops us
    try:
        _serve(worker, options, endpoint, link)
    except BaseException:
        link.replies.put(("error", worker, traceback.format_exc()))
        raise


def _serve(worker: int, options: DemoOptions, endpoint: str, link: RolloutLink) -> None:
    from rltel.demo.tracing import TRACING
    from rltel.logger import StatsLogger
    from telemetry import perf_tracer, stats_tracker

    config = {
        "experiment_name": "rltel-demo",
        "trial_name": "trial0",
        "fileroot": options.fileroot,
        "otlp": {"endpoint": endpoint},
        "tracing": TRACING,  # the worker's spans to the collector (rltel.demo.tracing)
    }
    logger = StatsLogger(config, role="rollout", worker_id=worker)
    record = logger.config.run_dir / "rollout-workers" / f"worker-{worker}.jsonl"
    record.parent.mkdir(parents=True, exist_ok=True)
    model, generator = TinyMoELM(), torch.Generator().manual_seed(500 + worker)
    try:
        while (command := _next_command(link.commands[worker])) is not None:
            step, version = command
            with (
                perf_tracer.trace_scope("rollout_step", args={"global_step": step}),
                stats_tracker.record_timing("generate"),
            ):
                model.load_state_dict(torch.load(link.policy_path, weights_only=True))
                tokens = generate(model, generator, worker_batch(worker))
                logp = rollout_logp(model, tokens, generator)
            reward = even_reward(tokens)
            for value in reward.tolist():
                stats_tracker.get("rollout").scalar(reward=value)
            log_rollout_samples(tokens, reward, "rollout")
            logger.commit(0, step, step, stats_tracker.export_all())
            wait_delivered(logger)
            _save(
                {"tokens": tokens, "logp": logp, "version": version}, link.batch_path(step, worker)
            )
            line = {
                "step": step,
                "worker": worker,
                "count": len(reward),
                "sum": float(reward.sum()),
            }
            with record.open("a") as file:
                file.write(json.dumps(line) + "\n")
            link.replies.put(("ok", worker, step))
    finally:
        logger.close()


def _next_command(queue) -> tuple[int, int] | None:
    """The next (step, version), or None: asked to stop, or the demo's main process is gone."""
    parent = multiprocessing.parent_process()
    while True:
        try:
            return queue.get(timeout=1.0)
        except Empty:
            if parent is not None and not parent.is_alive():
                return None


def wait_delivered(logger) -> None:
    """Wait until everything the logger queued so far, its last commit included, was
    accepted by the collector.

    The collector merges rollout windows into the next training step it receives, in the
    order it accepts them: a worker's commit must arrive before the trainer's commit of the
    same step, and the trainer's before any worker's commit of the next step. A count of
    exported requests cannot tell this: a commit with samples is two requests, and the span
    batches share the queue. After ``EXPORT_WAIT_S`` the caller goes on (the OTLP sink's
    queue keeps retrying or spools).
    """
    logger.fanout.force_flush(EXPORT_WAIT_S)


def start_workers(options: DemoOptions, endpoint: str, scratch: Path) -> tuple[RolloutLink, list]:
    """Start ``options.rollout_workers`` spawned worker processes; (link, processes)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    link = RolloutLink(
        scratch,
        tuple(ctx.Queue() for _ in range(options.rollout_workers)),
        ctx.Queue(),
    )
    procs = [
        ctx.Process(
            target=rollout_worker,
            args=(w, options, endpoint, link),
            name=f"rltel-demo-rollout-{w}",
        )
        for w in range(options.rollout_workers)
    ]
    for proc in procs:
        proc.start()
    return link, procs


def stop_workers(link: RolloutLink, procs: list, timeout_s: float = 45.0) -> list[int | None]:
    """Tell every worker to finish (its logger flushes), wait, then end stragglers by PID.

    Returns the exit codes (negative: killed by that signal).
    """
    for queue in link.commands:
        queue.put(None)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(max(0.1, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return [proc.exitcode for proc in procs]
