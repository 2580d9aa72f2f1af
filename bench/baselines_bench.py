"""The kept baselines' cost: decoding rollout requests with and without logging their series.

Each of ``--workers`` rollout workers sends ``--steps`` requests of ``--keys`` scalar streams
as running totals (the cumulative histograms a ``StatsLogger(role="rollout")`` sends); the
decoder turns them into windows. Modes, in alternating blocks in one process: ``decoder``
(baselines in memory only), ``kept`` (:class:`collector.baselines.Baselines`: each request's
changed series appended to the log, one sync per request, the log folded into ``state.json``
as it grows; ``fsync: never``) and ``kept-fsync`` (``fsync: request``). Figures: microseconds
per request and ``kept``'s ratio to ``decoder`` of the same round.

Usage: ``python bench/baselines_bench.py [--workers 8] [--keys 64] [--steps 50]
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

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.baselines import Baselines
from telemetry.model.snapshot import ScalarMean, Snapshot
from telemetry.otlp.decode import Decoder
from telemetry.otlp.encode import encode

RUN = (("rltel.experiment", "bench"), ("rltel.trial", "t"), ("rltel.role", "rollout"))
START = 1_000


def requests(workers: int, keys: int, steps: int) -> list[ExportMetricsServiceRequest]:
    """Every worker's requests, step by step: running totals of ``keys`` scalar streams."""
    out = []
    for step in range(1, steps + 1):
        for w in range(workers):
            points = tuple(ScalarMean(f"rollout/k{k}", 0.5 + k, 4 * step) for k in range(keys))
            resource = (*RUN, ("rltel.worker_id", f"w{w}"))
            snapshot = Snapshot(points, None, resource, 10_000 + step, "rollout")
            (data,) = encode(
                snapshot, start_unix_nano=START, cumulative_scalars=True, max_points=keys + 3
            )
            out.append(encode_metrics(data))
    return out


def run(data: list[ExportMetricsServiceRequest], directory: Path | None, fsync: bool) -> float:
    """Seconds to decode every request (and keep its series, with ``directory``)."""
    decoder = Decoder(started_ns=START - 1)
    store = None if directory is None else Baselines(directory, decoder, fsync)
    start = time.perf_counter()
    for message in data:
        decoder.decode(message)
        if store is not None:
            store.journal.sync()
    elapsed = time.perf_counter() - start
    if store is not None:
        store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--keys", type=int, default=64)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = requests(args.workers, args.keys, args.steps)
    modes = ("decoder", "kept", "kept-fsync")
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes:
                directory = None if mode == "decoder" else Path(tmp) / f"{mode}-{r}"
                results[mode].append(run(data, directory, mode.endswith("fsync")))
    print(f"{args.workers} workers x {args.keys} scalar streams a request, {args.steps} steps")
    for mode, times in results.items():
        per = [1e6 * t / len(data) for t in times]
        print(f"{mode:>12}: {statistics.median(per):8.1f} us/request (min {min(per):.1f})")
    ratio = [a / b for a, b in zip(results["kept"], results["decoder"])]
    print(f"kept / decoder, per round: {', '.join(f'{x:.2f}' for x in ratio)}")


if __name__ == "__main__":
    main()
