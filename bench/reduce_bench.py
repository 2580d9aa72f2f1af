"""The DP reduction at scale: bytes, collectives and time per export, before and after.

Workload per export (issue 25's): 200 token stats (one ``stat`` call, ``[4, 64]`` tensors
under one mask), 200 scalars, MoE balance for 48 layers x 128 experts, one timing
(``timeperf/step``, tracked by the straggler view): 7,749 float64 state elements. For
W = 2, 4, 8 and 16 gloo ranks, each rank exports ``EXPORTS`` times with the previous
gather-based reduction (``bench/gather_reduce.py``, swapped in for the bench) and with the
all-reduce one, and counts at the ``torch.distributed`` calls what each hands back to it:
``all_reduce`` its tensor, ``all_gather`` world x its tensor, ``all_gather_object`` the
pickled objects, ``gather`` the received list. Export time: wall clock of ``export_all``
after a barrier; reduction time: the part of it inside the reduction (the rest builds the
points); medians over exports on rank 0. The two designs alternate export by export.

Per-element costs for the paper table at W = 64 ... 4096 are measured in this process:
the gather design's reduction of a ``[W, n]`` matrix per element, and the all-reduce
design's local work per element (everything but the wire: packing, int64 keys for the
minima, the straggler values, the unpacking and the one host copy) plus one float64
add per element (the arithmetic a ring all-reduce does per element and rank).

    python bench/reduce_bench.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests.distributed import Counted

WORLDS = (2, 4, 8, 16)
PAPER_WORLDS = (64, 256, 1024, 4096)
EXPORTS, WARMUP = 10, 2
TOKEN_STATS, SCALARS, LAYERS, EXPERTS = 200, 200, 48, 128


def record(stats_tracker, moe, rank: int, step: int) -> None:
    gen = torch.Generator().manual_seed(rank * 1000 + step)
    mask = torch.rand(4, 64, generator=gen) < 0.7
    with stats_tracker.scope("ppo_actor"):
        stats_tracker.denominator(n_valid_tokens=mask)
        tokens = {f"tok{i}": torch.randn(4, 64, generator=gen) for i in range(TOKEN_STATS)}
        stats_tracker.stat(denominator="n_valid_tokens", **tokens)
        stats_tracker.scalar(**{f"scalar{i}": float(i + rank) for i in range(SCALARS)})
    for layer in range(LAYERS):
        moe.record(layer, torch.randint(0, EXPERTS, (256, 2), generator=gen), EXPERTS)
    stats_tracker.scalar(**{"timeperf/step": 1.0 + 0.01 * rank})


def measure(rank: int, world: int) -> dict:
    """Bytes, collectives, export and reduction time per export of both designs, which
    alternate export by export (so both see the same load on this shared machine)."""
    import gather_reduce

    from telemetry import stats_tracker
    from telemetry.metrics.moe import MoEBalance
    from telemetry.record import export, reduce

    torch.set_num_threads(1)
    moe = MoEBalance()
    counted = Counted()

    def gathering(*args, vote: bool = False, **kwargs):  # before: the samples' gather always ran
        return (*gather_reduce.reduce_with_spread(*args, **kwargs), True)

    designs = {"gather": gathering, "all-reduce": reduce.reduce_and_vote}
    samples: dict[str, dict[str, list]] = {d: {} for d in designs}
    for step in range(WARMUP + EXPORTS):
        for design, fn in designs.items():
            reducing: list[float] = []

            def timed(*args, _fn=fn, _out=reducing, **kwargs):
                start = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    _out.append(time.perf_counter() - start)

            export.reduce_and_vote = timed
            record(stats_tracker, moe, rank, step)
            dist.barrier()
            counted.take()
            start = time.perf_counter()
            stats_tracker.export_all(reduce_group=dist.group.WORLD)
            elapsed = time.perf_counter() - start
            calls = counted.take()
            if step >= WARMUP:
                for name, value in (
                    ("bytes", sum(size for _, size in calls)),
                    ("collectives", len(calls)),
                    ("ms", elapsed * 1e3),
                    ("reduce_ms", sum(reducing) * 1e3),
                ):
                    samples[design].setdefault(name, []).append(value)
    export.reduce_and_vote = reduce.reduce_and_vote
    return {
        design: {
            "bytes": max(by["bytes"]),
            "collectives": max(by["collectives"]),
            "ms": statistics.median(by["ms"]),
            "reduce_ms": statistics.median(by["reduce_ms"]),
        }
        for design, by in samples.items()
    }


def per_element_costs() -> dict[str, float]:
    """Seconds per element, best of 30 (this machine is shared): packing the payload (both
    designs), the gather design's stack and reduction of a ``[64, n]`` matrix per matrix
    element, the all-reduce design's local work but the packing per payload element (one
    rank, so no wire), and one float64 add."""
    import gather_reduce

    from telemetry import stats_tracker
    from telemetry.metrics.moe import MoEBalance
    from telemetry.record import reduce
    from telemetry.record.comm import Comm

    torch.set_num_threads(1)
    moe = MoEBalance(register=False)
    record(stats_tracker, moe, 0, 0)
    states = {f"tracker:|{k}": s for k, s in stats_tracker.DEFAULT_TRACKER.collect().states.items()}
    states.update(moe.collect().states)
    n = sum(len(layout.ops) for layout, _ in states.values())
    ops = [op for key in sorted(states) for op in states[key][0].ops]
    keys, _ = reduce.agree(Comm(None), {key: layout for key, (layout, _) in states.items()})
    parts = [torch.randn(n, dtype=torch.float64) for _ in range(64)]

    def best(fn, repeat: int = 30) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    pack = best(lambda: reduce._flat_payload(keys, states, torch.device("cpu")))
    matrix = best(lambda: gather_reduce._reduce_matrix(torch.stack(parts), ops))
    whole = best(lambda: reduce.reduce_with_spread(states, None, lambda key: "timeperf" in key))
    a, b = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
    return {
        "n": n,
        "pack": pack / n,
        "gather": matrix / (64 * n),
        "local": (whole - pack) / n,
        "add": best(lambda: a.add_(b)) / n,
    }


def paper_table(costs: dict[str, float]) -> None:
    """Bytes and the work that grows with W per export, for both designs, from the
    measured per-element costs; the work that does not grow with W is printed once."""
    n = costs["n"]
    print(f"\npaper table: n = {n} elements ({n * 8:,} bytes) per rank's payload")
    print(
        f"per element: packing (both designs) {costs['pack'] * 1e9:.1f} ns; gather design's "
        f"stack + reduction of [W, n] {costs['gather'] * 1e9:.2f} ns per matrix element; "
        f"all-reduce design's local work {costs['local'] * 1e9:.1f} ns + one add "
        f"{costs['add'] * 1e9:.2f} ns"
    )
    print(
        f"per export at any W: packing {n * costs['pack'] * 1e3:.2f} ms (both designs); "
        f"the all-reduce design's local work {n * costs['local'] * 1e3:.2f} ms"
    )
    print(
        f"{'W':>6} | {'gather: bytes back':>19} {'[W,n] matrix':>13} {'reduce ms':>10} | "
        f"{'all-reduce: bytes back':>23} {'ring wire bytes':>16} {'adds ms':>8}"
    )
    for world in PAPER_WORLDS:
        gathered = world * n * 8
        wire = 2 * (world - 1) / world * n * 8
        old_ms = world * n * costs["gather"] * 1e3
        adds_ms = (world - 1) / world * n * costs["add"] * 1e3
        print(
            f"{world:>6} | {gathered:>19,} {gathered / 2**20:>9.1f} MiB {old_ms:>10.2f} | "
            f"{n * 8 + 32:>23,} {wire:>16,.0f} {adds_ms:>8.4f}"
        )


def main() -> None:
    from tests.distributed import run_ranks

    print(
        f"torch {torch.__version__}; gloo; 1 torch thread per rank; median of {EXPORTS} "
        f"exports after {WARMUP} warm-up exports"
    )
    print(
        f"{'W':>3} | {'gather: bytes/rank':>18} {'colls':>5} {'export ms':>9} {'reduce ms':>9} | "
        f"{'all-reduce: bytes/rank':>22} {'colls':>5} {'export ms':>9} {'reduce ms':>9}"
    )
    for world in WORLDS:
        r = run_ranks(measure, world, timeout=1200)[0]
        row = [f"{world:>3}"]
        for design, width in (("gather", 18), ("all-reduce", 22)):
            d = r[design]
            times = f"{d['ms']:>9.1f} {d['reduce_ms']:>9.1f}"
            row.append(f"{d['bytes']:>{width},} {d['collectives']:>5} {times}")
        print(" | ".join(row))
    paper_table(per_element_costs())


if __name__ == "__main__":
    np.set_printoptions(linewidth=120)
    main()
