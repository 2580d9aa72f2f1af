"""Cost of the RL diagnostics per training step, as a ratio to one memory pass.

Workload: trainer/rollout log-probs ``[16, 4096]`` (float32, as engines return them)
and a bool generation mask (~70 % valid). Per step: ``record_train_infer``,
``record_advantage_fractions`` and ``record_version_stats`` into a fresh tracker, then
one ``export`` (world size 1). Baseline: one memory pass over the same inputs
(``trainer.sum() + rollout.sum() + mask.sum()``). Peak extra memory is the maximum of
the running sum of allocations minus frees reported by ``torch.profiler``
(``profile_memory=True``) during one call, next to the analytic size of the per-token
float64 temporaries; a ``[64, 32768]`` input shows that chunking bounds the peak.

Usage: ``.venv/bin/python bench/diagnostics_bench.py [--repeats N] [--threads T]``
(everything runs eager, on the calling thread: rltel compiles nothing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from telemetry.metrics import train_infer
from telemetry.metrics.advantages import record_advantage_fractions
from telemetry.metrics.staleness import record_version_stats
from telemetry.metrics.train_infer import record_train_infer
from telemetry.record.tracker import DistributedStatsTracker

MiB = 1 << 20


def inputs(rows: int, cols: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    trainer = -torch.rand(rows, cols, generator=gen) * 5
    rollout = trainer + torch.randn(rows, cols, generator=gen) * 0.05
    mask = torch.rand(rows, cols, generator=gen) < 0.7
    adv = torch.randn(rows, cols, generator=gen)
    versions = torch.randint(0, 6, (rows, cols), generator=gen)
    return trainer, rollout, mask, adv, versions


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``fn()`` in this thread's CPU time, which other processes on
    a shared machine do not inflate (the work is single-threaded: ``--threads 1``)."""
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        samples.append(time.thread_time() - start)
    return statistics.median(samples) * 1e3


def peak_extra_bytes(fn: Callable[[], object]) -> int:
    """Peak of (allocated - freed) bytes on the CPU allocator while ``fn`` runs.

    Each profiler event's *self* memory (its own allocations minus frees, children
    excluded; unattributed frees are ``[memory]`` events) is applied at its start time.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [
        (e.time_range.start, e.self_cpu_memory_usage)
        for e in prof.events()
        if e.self_cpu_memory_usage
    ]
    running = peak = 0
    for _, delta in sorted(events):
        running += delta
        peak = max(peak, running)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    trainer, rollout, mask, adv, versions = inputs(16, 4096)
    tokens = trainer.numel()

    def one_pass():
        return trainer.sum() + rollout.sum() + mask.sum()

    def train_infer_only():
        tracker = DistributedStatsTracker()
        with tracker.scope("ppo_actor"):
            record_train_infer(trainer, rollout, mask, tracker=tracker)
        return tracker

    def all_diagnostics():
        tracker = DistributedStatsTracker()
        with tracker.scope("ppo_actor"):
            record_train_infer(trainer, rollout, mask, tracker=tracker)
            record_advantage_fractions(adv, mask, tracker=tracker)
            with tracker.scope("update"):
                record_version_stats(versions, 6, mask, tracker=tracker)
        return tracker.export()

    first = time.perf_counter()
    all_diagnostics()
    first_ms = (time.perf_counter() - first) * 1e3
    base = median_ms(one_pass, args.repeats)
    t_infer = median_ms(train_infer_only, args.repeats)
    t_all = median_ms(all_diagnostics, args.repeats)
    print(
        f"inputs [16, 4096] float32, {tokens} tokens, threads={args.threads}, eager (no compiler)"
    )
    print(f"first call (all diagnostics + export): {first_ms:6.3f} ms")
    print(f"baseline one memory pass:            {base:8.3f} ms")
    print(f"record_train_infer:                  {t_infer:8.3f} ms  ratio {t_infer / base:6.1f}x")
    print(f"all diagnostics + export:            {t_all:8.3f} ms  ratio {t_all / base:6.1f}x")
    print(f"per token (all + export):            {t_all * 1e6 / tokens:8.1f} ns")

    input_bytes = trainer.nbytes + rollout.nbytes + mask.nbytes
    peak = peak_extra_bytes(train_infer_only)
    print(f"inputs (trainer+rollout+mask):       {input_bytes / MiB:8.2f} MiB")
    print(
        f"peak extra memory, train_infer:      {peak / MiB:8.2f} MiB "
        f"({peak / tokens:.0f} B/token, {peak / input_bytes:.1f}x inputs)"
    )
    peak_all = peak_extra_bytes(all_diagnostics)
    print(f"peak extra memory, all + export:     {peak_all / MiB:8.2f} MiB")

    big = inputs(64, 32768, seed=1)
    big_tokens = big[0].numel()

    def big_call():
        tracker = DistributedStatsTracker()
        record_train_infer(big[0], big[1], big[2], tracker=tracker)

    chunk_peak = peak_extra_bytes(big_call)
    saved = train_infer.CHUNK_TOKENS
    train_infer.CHUNK_TOKENS = big_tokens
    try:
        unchunked_peak = peak_extra_bytes(big_call)
    finally:
        train_infer.CHUNK_TOKENS = saved
    print(
        f"[64, 32768] ({big_tokens} tokens): peak extra {chunk_peak / MiB:.1f} MiB chunked "
        f"({saved} tokens/chunk) vs {unchunked_peak / MiB:.1f} MiB unchunked"
    )
    t_big = median_ms(big_call, max(3, args.repeats // 10))
    print(
        f"[64, 32768] record_train_infer:     {t_big:8.1f} ms "
        f"({t_big * 1e6 / big_tokens:.1f} ns/token)"
    )


if __name__ == "__main__":
    main()
