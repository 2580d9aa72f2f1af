"""Cost of the RL diagnostics per training step, as a ratio to one memory pass.

Workload: trainer/rollout log-probs ``[16, 4096]`` (float32, as engines return them)
and a bool generation mask (~70 % valid). Per step: ``record_train_infer``,
``record_advantage_fractions`` and ``record_version_stats`` into a fresh tracker, then
one ``export`` (world size 1). ``record_train_infer`` is also timed into one tracker kept
across steps (a training loop's steady state). Baseline: one memory pass over the same
inputs (``trainer.sum() + rollout.sum() + mask.sum()``). The calls are timed in turns of
ten consecutive calls (baseline, then each measured call, repeated), so that a load
change on a shared machine moves all of them alike; each figure is a median in this
thread's CPU time (see ``median_ms``). Peak extra memory is the maximum of the running
sum of allocations minus frees reported by ``torch.profiler`` (``profile_memory=True``)
during one call, next to the scratch memory train_infer keeps between calls; a
``[64, 32768]`` input shows that chunking bounds both.

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
ROUND = 10


def inputs(rows: int, cols: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    trainer = -torch.rand(rows, cols, generator=gen) * 5
    rollout = trainer + torch.randn(rows, cols, generator=gen) * 0.05
    mask = torch.rand(rows, cols, generator=gen) < 0.7
    adv = torch.randn(rows, cols, generator=gen)
    versions = torch.randint(0, 6, (rows, cols), generator=gen)
    return trainer, rollout, mask, adv, versions


def median_ms(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each ``fn()`` in this thread's CPU time, which other
    processes on a shared machine do not inflate (the work is single-threaded:
    ``--threads 1``).

    The functions take turns in rounds of ``ROUND`` consecutive calls each (after one
    call that warms the caches for it, as a loop of that call alone would), so that a
    load change moves all of them alike; a figure is the median over rounds of each
    round's median.
    """
    rounds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(3, repeats // ROUND)):
        for name, fn in fns.items():
            fn()
            samples = []
            for _ in range(ROUND):
                start = time.thread_time()
                fn()
                samples.append(time.thread_time() - start)
            rounds[name].append(statistics.median(samples))
    return {name: statistics.median(xs) * 1e3 for name, xs in rounds.items()}


def scratch_bytes() -> int:
    """Bytes train_infer keeps in scratch memory between calls (all devices)."""
    return sum(scratch.held_bytes for scratch in train_infer._scratch.values())


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
    parser.add_argument("--repeats", type=int, default=60)
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

    kept = DistributedStatsTracker()

    def train_infer_kept_tracker():
        with kept.scope("ppo_actor"):
            record_train_infer(trainer, rollout, mask, tracker=kept)

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
    times = median_ms(
        {
            "base": one_pass,
            "infer": train_infer_only,
            "kept": train_infer_kept_tracker,
            "all": all_diagnostics,
        },
        args.repeats,
    )
    base = times["base"]
    print(
        f"inputs [16, 4096] float32, {tokens} tokens, threads={args.threads}; path: eager ATen "
        "on the calling thread (no compiler), train_infer compares in float32"
    )
    print(f"first call (all diagnostics + export): {first_ms:6.3f} ms")
    print(f"baseline one memory pass:            {base:8.3f} ms")
    for label, name in (
        ("record_train_infer (fresh tracker):", "infer"),
        ("record_train_infer (kept tracker): ", "kept"),
        ("all diagnostics + export:          ", "all"),
    ):
        print(f"{label}  {times[name]:8.3f} ms  ratio {times[name] / base:6.1f}x")
    print(f"per token (all + export):            {times['all'] * 1e6 / tokens:8.1f} ns")

    input_bytes = trainer.nbytes + rollout.nbytes + mask.nbytes
    peak = peak_extra_bytes(train_infer_only)
    held = scratch_bytes()
    print(f"inputs (trainer+rollout+mask):       {input_bytes / MiB:8.2f} MiB")
    print(
        f"peak extra memory, train_infer:      {peak / MiB:8.2f} MiB "
        f"({peak / tokens:.0f} B/token, {peak / input_bytes:.1f}x inputs), "
        f"plus {held / MiB:.2f} MiB of scratch kept between calls"
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
        f"({saved} tokens/chunk) vs {unchunked_peak / MiB:.1f} MiB unchunked; scratch kept "
        f"{scratch_bytes() / MiB:.1f} MiB"
    )
    t_big = median_ms({"big": big_call}, max(3, args.repeats // 10))["big"]
    print(
        f"[64, 32768] record_train_infer:     {t_big:8.1f} ms "
        f"({t_big * 1e6 / big_tokens:.1f} ns/token)"
    )


if __name__ == "__main__":
    main()
