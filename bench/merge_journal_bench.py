"""The rollout merge journal's cost: merging windows with and without journaling them.

Each step, ``--workers`` rollout workers hand the run's merger a window of ``--keys``
histogram points (masked token stats, as ``stat()`` sends them) and a token counter; then a
training step releases the merged windows. In a durable collector every window is first
journaled for the shared sinks (Prometheus), which encodes it; the merge journal then
appends the same record (encoded once) and checkpoints at each step. Modes, in alternating
blocks in one process: ``merger`` (no durable queue), ``before`` (the shared sink's journal
and the merger: a durable collector before the merge journal), ``after`` (the merge journal
too), each with ``fsync: never`` (page cache, what a killed collector keeps) and
``after-fsync`` with ``fsync: request`` (a sync per window, as per request). Figures:
microseconds per window (its share of the step's release and checkpoint included) and
``after``'s ratio to ``before`` of the same round: the merge journal's own cost.

Usage: ``python bench/merge_journal_bench.py [--workers 8] [--keys 64] [--steps 50]
[--rounds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from collector.merge import RolloutMerger
from exporters.journal import Journal
from telemetry.model.snapshot import Counter, Histogram, Snapshot, Step

RUN = (("rltel.experiment", "bench"), ("rltel.trial", "t"))


def windows(workers: int, keys: int, steps: int) -> list[list[Snapshot]]:
    """Per step, each worker's window (distinct times, so none is a duplicate)."""
    out = []
    for step in range(steps):
        row = []
        for w in range(workers):
            points = [
                Histogram(f"rollout/k{k}", 8, 8.0 * (k + w), 0.0, 2.0 * k) for k in range(keys)
            ]
            points.append(Counter("rollout/tokens", 100.0 * (step + 1) * (w + 1)))
            resource = (*RUN, ("rltel.role", "rollout"), ("rltel.worker_id", f"w{w}"))
            row.append(Snapshot(tuple(points), None, resource, 1 + step * workers + w, "rollout"))
        out.append(row)
    return out


def run(data: list[list[Snapshot]], shared: Journal | None, merge: Journal | None) -> float:
    """Seconds to journal (shared sink), merge, release and checkpoint every step, each
    request's journals synced before its answer."""
    merger = RolloutMerger()
    journals = [j for j in (shared, merge) if j is not None]
    if merge is not None:
        merger.journal_to(merge)
    start = time.perf_counter()
    for step, row in enumerate(data, 1):
        for window in row:
            if shared is not None:
                shared.append(window)
            merger.add(window)
            for journal in journals:
                journal.sync()
        train = Snapshot((), Step(0, step, step), (*RUN, ("rltel.rank", 0)), step)
        merger.on_train(train)
        merger.checkpoint()
        for journal in journals:
            journal.sync()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = windows(args.workers, args.keys, args.steps)
    n = args.workers * args.steps
    modes = ("merger", "before", "after", "after-fsync")
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes:
                fsync = mode.endswith("fsync")
                opened = [
                    Journal(Path(tmp) / f"{part}-{mode}-{r}", 1 << 30, fsync=fsync)
                    if mode != "merger" and (part == "shared" or mode.startswith("after"))
                    else None
                    for part in ("shared", "merge")
                ]
                results[mode].append(run(data, *opened))
                for journal in opened:
                    if journal is not None:
                        journal.close()
    print(f"{args.workers} workers x {args.keys + 1} points a window, {args.steps} steps")
    for mode, times in results.items():
        per = [1e6 * t / n for t in times]
        print(f"{mode:>12}: {statistics.median(per):8.1f} us/window (min {min(per):.1f})")
    ratio = [a / b for a, b in zip(results["after"], results["before"])]
    print(f"after / before, per round: {', '.join(f'{x:.2f}' for x in ratio)}")


if __name__ == "__main__":
    main()
