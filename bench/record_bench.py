"""Recording + export cost of the stats tracker against one memory pass over the same tensors.

Workload per step: 8 minibatches, each a [16, 4096] bool mask at ~70% density, 12
token-level float32 stats (3 ``stat`` calls of 4) and 4 sequence-level stats; one
``export_all`` per step. Prints record/export time per step, accumulator bytes held
before export (at two tensor sizes), collectives per export, and the ratio of
record+export to ``x.sum()`` over the same tensors, for 1 and 2 gloo ranks. The kernel
is plain ATen on the caller's thread (rltel compiles nothing), so a cold start differs
from a warm one only by first-use allocations: the first step is reported on its own,
measured in a fresh process with an empty ``TORCHINDUCTOR_CACHE_DIR``. Last, the
resident memory growth over 200 steps after the first. Then the same step inside
``record_timing`` with and without a heartbeat thread beating every 50 ms (200x the default
rate) into a real TCPStore and reading it back, as rank 0 does: the ratio of the step's
median wall and CPU time, on over off, in alternating blocks, beside off over off (the
run-to-run noise of the same blocks).

    python bench/record_bench.py
"""

from __future__ import annotations

import functools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

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
            seqs = torch.ones(BATCH, dtype=torch.bool, device=batch["mask"].device)
            stats_tracker.denominator(n_valid_tokens=batch["mask"], n_seqs=seqs)
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
    states = stats_tracker.DEFAULT_TRACKER.collect(reset=False).states
    return sum(t.numel() * t.element_size() for _, t in states.values())


def timed(fn, *args) -> tuple[float, float]:
    """Wall-clock and this thread's CPU seconds of ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.thread_time()
    fn(*args)
    return time.perf_counter() - wall, time.thread_time() - cpu


def measure(rank: int = 0, world: int = 1) -> dict[str, float]:
    from telemetry import stats_tracker
    from telemetry.record.reduce import collectives_issued

    group = dist.group.WORLD if world > 1 else None  # None is rank-local
    export_all = functools.partial(stats_tracker.export_all, reduce_group=group)

    torch.set_num_threads(1)
    batches = make_step()
    start = time.perf_counter()
    record_step(stats_tracker, batches)
    export_all()
    first_step = time.perf_counter() - start
    samples: dict[str, list[float]] = {}
    collectives = []
    for i in range(WARMUP + STEPS):
        base = timed(memory_pass, batches)
        recorded = timed(record_step, stats_tracker, batches)
        held = held_bytes(stats_tracker)
        before = collectives_issued()
        exported = timed(export_all)
        if i >= WARMUP:
            for name, (wall, cpu) in (("base", base), ("record", recorded), ("export", exported)):
                samples.setdefault(f"{name}_wall", []).append(wall)
                samples.setdefault(f"{name}_cpu", []).append(cpu)
            collectives.append(collectives_issued() - before)
    record_step(stats_tracker, make_step(seq=4 * SEQ))
    held_large = held_bytes(stats_tracker)
    export_all()
    m = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "first_step_s": first_step,
        "record_ms": m["record_wall"] * 1e3,
        "export_ms": m["export_wall"] * 1e3,
        "memory_pass_ms": m["base_wall"] * 1e3,
        "ratio": (m["record_wall"] + m["export_wall"]) / m["base_wall"],
        "ratio_cpu": (m["record_cpu"] + m["export_cpu"]) / m["base_cpu"],
        "held_bytes": held,
        "held_bytes_4x_tokens": held_large,
        "collectives": max(collectives),
    }


def _rank_entry(rank: int, world: int) -> dict[str, float]:
    return measure(rank, world)


def rss_bytes() -> int:
    """Current resident set size of this process (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def rss_growth(steps: int = 200, window: int = 20) -> tuple[float, float, float]:
    """Median RSS of the first and last ``window`` of ``steps`` steps after the first, and
    the peak: single readings swing by a few MiB as the allocator maps and returns the
    multi-MiB temporaries, so the trend is read from medians."""
    from telemetry import stats_tracker

    batches = make_step()
    record_step(stats_tracker, batches)
    stats_tracker.export_all()
    readings = []
    for _ in range(steps):
        record_step(stats_tracker, batches)
        stats_tracker.export_all()
        readings.append(rss_bytes())
    first, last = readings[:window], readings[-window:]
    return statistics.median(first), statistics.median(last), max(readings)


def first_step_in_fresh_process() -> float:
    """Seconds of the first record+export step in a new process with an empty compiler cache."""
    code = (
        "import sys, time, torch; sys.path.insert(0, 'bench'); import record_bench as b; "
        "torch.set_num_threads(1); from telemetry import stats_tracker as st; "
        "batches = b.make_step(); t = time.perf_counter(); b.record_step(st, batches); "
        "st.export_all(); print(time.perf_counter() - t)"
    )
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
        )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return float(done.stdout.split()[-1])


def heartbeat_ratio(blocks: int = 6, steps: int = 15) -> dict[str, float]:
    """Median step time with the heartbeat thread off (ms) and the ratios on/off and, as
    the noise floor, off/off (two interleaved sets of blocks without it), in wall and this
    thread's CPU time, over ``blocks`` rounds of three alternating blocks of ``steps``."""
    from datetime import timedelta

    from telemetry import stats_tracker
    from telemetry.heartbeat import Heartbeat, StoreBoard

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    batches = make_step()

    def step() -> None:
        with stats_tracker.record_timing("ppo_actor/update"):
            record_step(stats_tracker, batches)
        stats_tracker.export_all(reduce_group=None)

    def beating() -> Callable[[], None]:
        return Heartbeat(StoreBoard(store, 1, "trainer", 5.0), 0, "bench", 0.05, reader=True).close

    ratios = on_off_ratios(step, beating, blocks, steps)
    beat = Heartbeat(StoreBoard(store, 8, "trainer", 5.0), 0, "bench", 3600.0, reader=True)
    for rank in range(8):  # rank 0 reads back 8 ranks' beats
        beat._board.publish(beat.progress.beat(rank, "bench"))
    beat_cpu = timed(lambda: [beat._beat(False) for _ in range(200)])[1] / 200
    beat.close()
    return {**ratios, "beat_cpu_us": beat_cpu * 1e6}


def on_off_ratios(
    step: Callable[[], None], switch_on: Callable[[], Callable[[], None]], blocks: int, steps: int
) -> dict[str, float]:
    """Time ``step`` in ``blocks`` rounds of three alternating blocks of ``steps`` (off, on,
    off again; ``switch_on()`` before an "on" block returns what switches it off after it;
    each block's first step settles the switch and is left out): the median step off (ms)
    and the ratios on/off and, as the noise floor, off again/off, in wall and CPU time."""
    modes = ("off", "on", "off again")
    samples: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for block in range(3 * blocks):
        mode = modes[block % 3]
        switch_off = switch_on() if mode == "on" else None
        for i in range(steps + 1):
            took = timed(step)
            if i:
                samples[mode].append(took)
        if switch_off is not None:
            switch_off()
    wall = {mode: statistics.median(w for w, _ in got) for mode, got in samples.items()}
    cpu = {mode: statistics.median(c for _, c in got) for mode, got in samples.items()}
    return {
        "step_ms": wall["off"] * 1e3,
        "wall": wall["on"] / wall["off"],
        "cpu": cpu["on"] / cpu["off"],
        "noise_wall": wall["off again"] / wall["off"],
        "noise_cpu": cpu["off again"] / cpu["off"],
    }


def main() -> None:
    print(
        f"kernel: eager ATen (no compiler); torch {torch.__version__}; 1 thread per rank; "
        f"median of {STEPS} steps after {WARMUP} warm-up steps"
    )
    results = {"1 rank": measure()}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tests.distributed import run_ranks

    results["2 gloo ranks (rank 0)"] = run_ranks(_rank_entry, 2, timeout=600)[0]
    header = (
        f"{'setup':<24}{'record ms':>10}{'export ms':>10}{'x.sum ms':>10}{'ratio':>8}"
        f"{'cpu ratio':>10}{'held B':>8}{'held B 4x':>10}{'colls':>6}"
    )
    print(header)
    for name, r in results.items():
        print(
            f"{name:<24}{r['record_ms']:>10.2f}{r['export_ms']:>10.2f}{r['memory_pass_ms']:>10.2f}"
            f"{r['ratio']:>8.2f}{r['ratio_cpu']:>10.2f}{r['held_bytes']:>8d}"
            f"{r['held_bytes_4x_tokens']:>10d}{r['collectives']:>6d}"
        )
    print(
        "ratio: wall-clock (record + export) / x.sum; cpu ratio: the same in this thread's CPU "
        "time, which other processes on a shared machine do not inflate"
    )
    first = results["1 rank"]["first_step_s"]
    print(f"first step, this process (after imports):       {first * 1e3:8.1f} ms")
    cold = first_step_in_fresh_process()
    print(f"first step, fresh process, empty inductor cache: {cold * 1e3:8.1f} ms")
    first, last, peak = rss_growth()
    print(
        f"RSS over 200 steps after the first (median of steps 1-20 -> 181-200): "
        f"{first / 2**20:.1f} -> {last / 2**20:.1f} MiB (growth {(last - first) / 2**20:+.2f} "
        f"MiB), peak {peak / 2**20:.1f} MiB"
    )
    hb = heartbeat_ratio()
    print(
        f"heartbeat every 50 ms (TCPStore, read back), step of {hb['step_ms']:.1f} ms: on/off "
        f"wall {hb['wall']:.3f}x, cpu {hb['cpu']:.3f}x; off/off (noise) wall "
        f"{hb['noise_wall']:.3f}x, cpu {hb['noise_cpu']:.3f}x; one beat of rank 0 (8 ranks "
        f"read back): {hb['beat_cpu_us']:.0f} us of its thread's CPU"
    )


if __name__ == "__main__":
    main()
