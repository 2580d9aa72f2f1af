"""The step every check records: ``bench/record_bench.py``'s PPO-like workload on a device.

8 micro-batches of a ``[16, 4096]`` bool mask (~70% valid), 12 token stats and 4 sequence
stats each (record_bench's shapes and calls), plus what a PPO update adds on the same
tokens: the train/infer diagnostics, version stats, a tensor-valued scalar, a
``record_timing`` span and train_perf's ``train_batch`` window.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from bench.record_bench import BATCH, SEQ, make_step, memory_pass, record_step

__all__ = ["Step", "make", "memory_pass", "record", "sync_debug"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step's tensors on one device: record_bench's batches and the PPO extras."""

    batches: list[dict]
    trainer_logp: torch.Tensor
    rollout_logp: torch.Tensor
    versions: torch.Tensor
    grad_norm: torch.Tensor

    @property
    def masks(self) -> list[torch.Tensor]:
        return [batch["mask"] for batch in self.batches]

    def bytes_read(self) -> int:
        """What :func:`memory_pass` reads: every token and sequence stat once."""
        tensors = [t for b in self.batches for t in (*b["tokens"], *b["seqs"])]
        return sum(t.numel() * t.element_size() for t in tensors)


def make(device: str, seq: int = SEQ) -> Step:
    """The step's tensors, made on the CPU from fixed seeds and moved to ``device``."""
    batches = [
        {
            "mask": b["mask"].to(device),
            "tokens": [t.to(device) for t in b["tokens"]],
            "seqs": [t.to(device) for t in b["seqs"]],
        }
        for b in make_step(seq)
    ]
    gen = torch.Generator().manual_seed(1)
    trainer = -torch.rand(BATCH, seq, generator=gen) * 3
    rollout = trainer + torch.randn(BATCH, seq, generator=gen) * 0.05
    versions = torch.randint(0, 4, (BATCH, seq), generator=gen)
    return Step(
        batches,
        trainer.to(device),
        rollout.to(device),
        versions.to(device),
        torch.tensor(1.25).to(device),
    )


def record(tracker, step: Step, perf=None) -> None:
    """Record ``step`` into ``tracker`` as a PPO update does; inside ``perf.measure`` (a
    :class:`~telemetry.metrics.train_perf.TrainPerf`) when given."""
    from telemetry.metrics.staleness import record_version_stats
    from telemetry.metrics.train_infer import record_train_infer

    timed = perf.measure(step.masks[0]) if perf is not None else nullcontext()
    with timed, tracker.record_timing("train_step"):
        record_step(tracker, step.batches)
        with tracker.scope("ppo_actor"):
            tracker.scalar(grad_norm=step.grad_norm)
            mask = step.masks[0]
            record_train_infer(step.trainer_logp, step.rollout_logp, mask, tracker=tracker)
            record_version_stats(step.versions, 4, mask, tracker=tracker)


def sync_debug(mode: str | None) -> AbstractContextManager[None]:
    """``torch.cuda.set_sync_debug_mode(mode)`` inside the block, back to the previous
    mode after; ``None``: nothing (the CPU)."""
    if mode is None:
        return nullcontext()
    return _SyncDebug(mode)


class _SyncDebug:
    def __init__(self, mode: str) -> None:
        self._mode, self._before = mode, 0

    def __enter__(self) -> None:
        self._before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(self._mode)

    def __exit__(self, *exc: object) -> None:
        torch.cuda.set_sync_debug_mode(self._before)
