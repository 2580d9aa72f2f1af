"""Recording + export cost of the stats tracker against one memory pass over the same tensors.

Workload per step: 8 minibatches, each a [16, 4096] bool mask at ~70% density, 12
token-level float32 stats (3 ``stat`` calls of 4) and 4 sequence-level stats; one
``export_all`` per step. Prints record/export time per step, accumulator bytes held
before export (at two tensor sizes), collectives per export, and the ratio of
record+export to ``x.sum()`` over the same tensors, for 1 and 2 gloo ranks.

    python bench/record_bench.py                   # fused kernel, compiled in the background
    RLTEL_COMPILE=0 python bench/record_bench.py   # eager kernel only
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MINIBATCHES, BATCH, SEQ, TOKEN_STATS, SEQ_STATS = 8, 16, 4096, 12, 4
STEPS, WARMUP = 20, 3


def make_step(seq: int = SEQ) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(MINIBATCHES):
        mask = torch.rand(BATCH, seq, generator=gen) < 0.7
        batches.append(
            {
                "mask": mask,
                "tokens": [torch.randn(BATCH, seq, generator=gen) for _ in range(TOKEN_STATS)],
                "seqs": [torch.randn(BATCH, generator=gen) for _ in range(SEQ_STATS)],
            }
        )
    return batches


def record_step(stats_tracker, batches: list[dict]) -> None:
    for batch in batches:
        with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
            stats_tracker.denominator(
                n_valid_tokens=batch["mask"], n_seqs=torch.ones(BATCH, dtype=torch.bool)
            )
            tokens = batch["tokens"]
            for call in range(3):
                stats_tracker.stat(
                    denominator="n_valid_tokens",
                    **{f"tok{call * 4 + i}": tokens[call * 4 + i] for i in range(4)},
                )
            stats_tracker.stat(
                denominator="n_seqs", **{f"seq{i}": t for i, t in enumerate(batch["seqs"])}
            )


def memory_pass(batches: list[dict]) -> None:
    for batch in batches:
        for x in batch["tokens"]:
            x.sum()
        for x in batch["seqs"]:
            x.sum()


def held_bytes(stats_tracker) -> int:
    states = stats_tracker.DEFAULT_TRACKER.collect_states(reset=False)
    return sum(t.numel() * t.element_size() for _, t in states.values())


def measure(rank: int = 0, world: int = 1) -> dict[str, float]:
    from telemetry import stats_tracker
    from telemetry.kernels import wait_for_kernels
    from telemetry.reduce import collectives_issued

    torch.set_num_threads(1)
    batches = make_step()
    start = time.perf_counter()
    record_step(stats_tracker, batches)
    stats_tracker.export_all()
    first_step = time.perf_counter() - start
    wait_for_kernels()
    compile_wait = time.perf_counter() - start
    record_t, export_t, base_t, collectives = [], [], [], []
    for i in range(WARMUP + STEPS):
        start = time.perf_counter()
        memory_pass(batches)
        base = time.perf_counter() - start
        start = time.perf_counter()
        record_step(stats_tracker, batches)
        recorded = time.perf_counter() - start
        held = held_bytes(stats_tracker)
        before = collectives_issued()
        start = time.perf_counter()
        stats_tracker.export_all()
        exported = time.perf_counter() - start
        if i >= WARMUP:
            record_t.append(recorded)
            export_t.append(exported)
            base_t.append(base)
            collectives.append(collectives_issued() - before)
    record_step(stats_tracker, make_step(seq=4 * SEQ))
    held_large = held_bytes(stats_tracker)
    stats_tracker.export_all()
    record, export, base = (statistics.median(v) for v in (record_t, export_t, base_t))
    return {
        "first_step_s": first_step,
        "kernel_ready_s": compile_wait,
        "record_ms": record * 1e3,
        "export_ms": export * 1e3,
        "memory_pass_ms": base * 1e3,
        "ratio": (record + export) / base,
        "held_bytes": held,
        "held_bytes_4x_tokens": held_large,
        "collectives": max(collectives),
    }


def _rank_entry(rank: int, world: int) -> dict[str, float]:
    return measure(rank, world)


def main() -> None:
    kernel = "eager" if os.environ.get("RLTEL_COMPILE") == "0" else "fused (torch.compile)"
    print(f"kernel: {kernel}; torch {torch.__version__}; 1 thread per rank; median of {STEPS}")
    results = {"1 rank": measure()}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tests.distributed import run_ranks

    results["2 gloo ranks (rank 0)"] = run_ranks(_rank_entry, 2, timeout=600)[0]
    header = (
        f"{'setup':<24}{'record ms':>10}{'export ms':>10}{'x.sum ms':>10}{'ratio':>8}"
        f"{'held B':>8}{'held B 4x':>10}{'colls':>6}{'1st step s':>11}{'ready s':>8}"
    )
    print(header)
    for name, r in results.items():
        print(
            f"{name:<24}{r['record_ms']:>10.2f}{r['export_ms']:>10.2f}{r['memory_pass_ms']:>10.2f}"
            f"{r['ratio']:>8.2f}{r['held_bytes']:>8d}{r['held_bytes_4x_tokens']:>10d}"
            f"{r['collectives']:>6d}{r['first_step_s']:>11.2f}{r['kernel_ready_s']:>8.1f}"
        )


if __name__ == "__main__":
    main()
