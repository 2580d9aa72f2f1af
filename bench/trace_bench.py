"""Cost of one ``perf_tracer.trace_scope`` span on the caller's thread, against an empty
context manager timed in the same run.

Each round times ``--calls`` scopes shaped like AReaL's trainer's
(``trace_scope("train.ppo_update", category=Category.COMPUTE, args={"global_step": s})``)
and as many ``with`` blocks of an empty context manager (the baseline), interleaved, in
thread CPU time (the batch export runs on the SDK's thread and is not counted; other
processes on a shared machine do not inflate it). Setups: tracing not configured (the
no-op), configured with every span kept (written to a Chrome trace file under a temporary
directory), and sampled at ``--rate`` spans per second (most spans dropped by the sampler);
plus ``record_timing`` alone and with its span. Reported: the median per-call time over
rounds and its ratio to the baseline's, and the process CPU time per span including the
replay into SDK spans and the export (all threads, the round plus a ``save()``).

    python bench/trace_bench.py [--calls 5000] [--rounds 9] [--rate 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from telemetry import perf_tracer, stats_tracker


class Empty:
    """The baseline: a context manager that does nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


@dataclass
class Config:
    """AReaL's ``PerfTracerConfig`` fields plus rltel's sample rate and queue bound."""

    fileroot: str
    experiment_name: str = "bench"
    trial_name: str = "trace"
    enabled: bool = True
    save_interval: int = 1
    sample_rate: float | None = None
    max_queue: int = 65536


def per_call_ns(body: Callable[[int], None], calls: int) -> float:
    start = time.thread_time_ns()
    body(calls)
    return (time.thread_time_ns() - start) / calls


def empty(calls: int) -> None:
    for _ in range(calls):
        with Empty():
            pass


def scopes(calls: int) -> None:
    category = perf_tracer.Category.COMPUTE
    for step in range(calls):
        with perf_tracer.trace_scope(
            "train.ppo_update", category=category, args={"global_step": step}
        ):
            pass


def timings(calls: int) -> None:
    for _ in range(calls):
        with stats_tracker.record_timing("bench"):
            pass


def measure(body: Callable[[int], None], calls: int, rounds: int) -> tuple[float, float, float]:
    ours, base, total = [], [], []
    for _ in range(rounds):
        base.append(per_call_ns(empty, calls))
        start = time.process_time_ns()
        ours.append(per_call_ns(body, calls))
        perf_tracer.save()  # replay and export what the round recorded
        total.append((time.process_time_ns() - start) / calls)
    return tuple(statistics.median(x) / 1000 for x in (ours, base, total))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--rate", type=float, default=1000.0)
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        setups = [
            ("off (not configured)", None, scopes),
            ("on, every span kept", Config(root), scopes),
            (f"sampled at {options.rate:g}/s", Config(root, sample_rate=options.rate), scopes),
            ("record_timing, tracing off", None, timings),
            ("record_timing + its span", Config(root), timings),
        ]
        for label, config, body in setups:
            if config is not None:
                perf_tracer.configure(config, rank=0, role="bench")
            ours, base, total = measure(body, options.calls, options.rounds)
            if config is not None:
                health = perf_tracer.get_tracer().health()
                perf_tracer.reset()
            else:
                health = {}
            dropped = health.get("spans_dropped", 0)
            rows.append((label, ours, base, total, dropped))
    print(f"{options.calls} calls x {options.rounds} rounds, thread CPU time, median per call")
    print("| setup | caller us/span | empty cm us | ratio | process us/span | queue drops |")
    print("|---|---|---|---|---|---|")
    for label, ours, base, total, dropped in rows:
        print(
            f"| {label} | {ours:.2f} | {base:.3f} | {ours / base:.1f}x | {total:.1f} | {dropped} |"
        )


if __name__ == "__main__":
    main()
