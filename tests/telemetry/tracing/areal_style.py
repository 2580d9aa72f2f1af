"""A training loop shaped like AReaL's ``PPOTrainer.train`` and its rollout workflow, written
against a ``perf_tracer`` module: AReaL's own (loaded from its wheel) or rltel's.

Only the module differs between the two runs (``from areal.utils import perf_tracer`` or
``from telemetry import perf_tracer``): the calls are the shapes of AReaL's call sites
(``rl_trainer.py``: ``configure(config.perf_tracer, rank=..., role="master")``, phases in
``trace_scope(f"train.<phase>", category=Category.X, args={"global_step": ...})`` beside
``stats_tracker.record_timing``, ``save(step=...)`` per step and ``save(force=True)`` at
close; ``workflow_executor.py``: ``instant(..., category="scheduler")``, ``register_task``,
``set_task_id``, ``trace_session_event("mark_finalized", task_id=..., status=...)``;
``rlvr.py``: ``@session_context()``, ``atrace_session_phase("generate")``,
``@trace_session("reward")``; engines: ``@trace_perf(..., category="compute")``).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

from telemetry import stats_tracker

SAMPLES = 2
"""Sessions per task (AReaL's ``n_samples``)."""

TASKS = 3
"""Tasks per rollout batch."""


def _engine(perf_tracer: types.ModuleType) -> Any:
    class Engine:
        @perf_tracer.trace_perf("ppo_actor.ppo_update", category="compute")
        def ppo_update(self, batch: list[float]) -> float:
            with perf_tracer.trace_scope("ppo_actor.minibatch", category="compute"):
                return sum(batch)

        @perf_tracer.trace_perf("actor.compute_logp", category=perf_tracer.Category.COMPUTE)
        async def compute_logp(self, batch: list[float]) -> list[float]:
            await asyncio.sleep(0)
            return [-x for x in batch]

    return Engine()


def _workflow(perf_tracer: types.ModuleType) -> Any:
    class Workflow:
        @perf_tracer.trace_session("reward")
        async def compute_reward(self, completion: float) -> float:
            await asyncio.sleep(0)
            return completion * 2

        @perf_tracer.session_context()
        async def collect(self, prompt: float) -> float:
            async with perf_tracer.atrace_session_phase("generate"):
                await asyncio.sleep(0)
                completion = prompt + 1
            return await self.compute_reward(completion)

        async def arun_episode(self, prompt: float) -> list[float]:
            return list(await asyncio.gather(*(self.collect(prompt) for _ in range(SAMPLES))))

    return Workflow()


async def _rollout(perf_tracer: types.ModuleType, step: int) -> list[float]:
    perf_tracer.instant(
        "workflow_executor.rollout_batch", category="scheduler", args={"data": TASKS}
    )
    workflow = _workflow(perf_tracer)

    async def run_task(task_id: int) -> list[float]:
        perf_tracer.set_task_id(task_id)
        rewards = await workflow.arun_episode(float(task_id))
        accepted = task_id % 3 != 2
        perf_tracer.trace_session_event(
            "mark_finalized",
            task_id=task_id,
            status="accepted" if accepted else "rejected",
            **({} if accepted else {"reason": "filtered"}),
        )
        return rewards if accepted else []

    task_ids = [step * TASKS + i for i in range(TASKS)]
    for task_id in task_ids:
        perf_tracer.register_task(task_id)
    batches = await asyncio.gather(*(run_task(t) for t in task_ids))
    return [r for batch in batches for r in batch]


def train(perf_tracer: types.ModuleType, config: Any, steps: int, rank: int = 0) -> None:
    """Configure ``perf_tracer`` from ``config`` (AReaL's ``PerfTracerConfig``) and run
    ``steps`` steps as AReaL's trainer does; the tracer is reset at the end."""
    Category = perf_tracer.Category
    perf_tracer.configure(config, rank=rank, role="master")
    engine = _engine(perf_tracer)
    try:
        for global_step in range(steps):
            with (
                stats_tracker.record_timing("rollout"),
                perf_tracer.trace_scope(
                    "train.rollout",
                    category=Category.COMPUTE,
                    args={"global_step": global_step, "epoch_step": global_step},
                ),
            ):
                batch = asyncio.run(_rollout(perf_tracer, global_step))
            with (
                stats_tracker.record_timing("recompute_logp"),
                perf_tracer.trace_scope(
                    "train.recompute_logp",
                    category=Category.COMPUTE,
                    args={"global_step": global_step},
                ),
            ):
                asyncio.run(engine.compute_logp(batch))
            with (
                stats_tracker.record_timing("train_step"),
                perf_tracer.trace_scope(
                    "train.ppo_update",
                    category=Category.COMPUTE,
                    args={"global_step": global_step},
                ),
            ):
                engine.ppo_update(batch)
            with (
                stats_tracker.record_timing("update_weights"),
                perf_tracer.trace_scope(
                    "train.update_weights",
                    category=Category.COMM,
                    args={"global_step": global_step},
                ),
            ):
                try:
                    with perf_tracer.trace_scope("train.weight_sync", category="communication"):
                        raise TimeoutError("a slow peer")
                except TimeoutError:
                    pass
            with perf_tracer.trace_scope(
                "train.log_stats", category=Category.INSTR, args={"global_step": global_step}
            ):
                stats_tracker.export_all(reduce_group=None)
            perf_tracer.save(step=global_step)
        perf_tracer.save(force=True)
    finally:
        perf_tracer.reset()
