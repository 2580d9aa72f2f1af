"""Cost of ``log_sample`` on the caller's thread, against a baseline in the same run.

Per step a rollout workflow logs ``--per-step`` samples (a 600-character prompt, a
2,400-character completion with a few non-ASCII characters, reward and length), then the
StatsLogger drains the step (the default bounds: a reservoir of 16 plus 2 + 2 extremes,
4 KiB per field). Baseline: what the same workflow already does per sample,
``stats_tracker.get("rollout").scalar(reward=r)``, timed in the same loop. Reported: the
median per-call time of each (thread CPU time, which other processes on a shared machine
do not inflate), their ratio, the drain per step, and the memory the buffer holds at the
end of a step (tracemalloc), with and without a regex redact hook. Then the gather of
samples from every rank (``telemetry.record.gather``): what one rank sends in the export's
``gather_object`` (pickled bytes of its kept samples) and what merging every rank's part costs
the committing rank at 8 and 64 ranks, against its own drain in the same run; and the bytes
of a step's OTLP logs request (``encode_samples``, what the OTLP sink sends) at 100 and at
``--per-step`` samples logged.

    python bench/samples_bench.py [--per-step 10000] [--steps 5]
"""

from __future__ import annotations

import argparse
import pickle
import random
import re
import statistics
import time
import tracemalloc

from telemetry import stats_tracker
from telemetry.config import SamplesConfig
from telemetry.model.snapshot import Snapshot
from telemetry.otlp.samples import encode_samples
from telemetry.samples import SampleBuffer

EMAIL = re.compile(r"[\w.]+@[\w.]+")


def redact(fields: dict[str, str]) -> dict[str, str]:
    return {name: EMAIL.sub("<email>", text) for name, text in fields.items()}


def workload(per_step: int, seed: int) -> list[tuple[str, str, float]]:
    rng = random.Random(seed)
    words = ["the", "policy", "answer", "is", "λ", "step", "x@y.org", "42", "reward"]
    out = []
    for _ in range(per_step):
        prompt = " ".join(rng.choice(words) for _ in range(120))[:600]
        completion = " ".join(rng.choice(words) for _ in range(480))[:2400]
        out.append((prompt, completion, rng.random()))
    return out


def log_all(buffer: SampleBuffer, rows: list[tuple[str, str, float]]) -> None:
    for prompt, completion, reward in rows:
        buffer.log(
            "rollout",
            text={"prompt": prompt, "completion": completion},
            numbers={"reward": reward, "length": len(completion)},
        )


def run(per_step: int, steps: int, hook: bool) -> dict[str, float]:
    buffer = SampleBuffer(SamplesConfig(), redact=redact if hook else None, seed=0)
    tracker = stats_tracker.get("bench-rollout")
    ours, base, drains, held = [], [], [], []
    for step in range(steps):
        rows = workload(per_step, step)
        t0 = time.thread_time_ns()
        log_all(buffer, rows)
        t1 = time.thread_time_ns()
        for _, _, reward in rows:
            tracker.scalar(reward=reward)
        t2 = time.thread_time_ns()
        buffer.drain()
        t3 = time.thread_time_ns()
        tracker.export()
        tracemalloc.start()  # a second pass for memory: tracing slows every allocation
        before = tracemalloc.get_traced_memory()[0]
        log_all(buffer, rows)
        held.append(tracemalloc.get_traced_memory()[0] - before)
        tracemalloc.stop()
        buffer.drain()
        ours.append((t1 - t0) / per_step)
        base.append((t2 - t1) / per_step)
        drains.append(t3 - t2)
    return {
        "log_sample_us": statistics.median(ours) / 1e3,
        "scalar_us": statistics.median(base) / 1e3,
        "ratio": statistics.median(ours) / statistics.median(base),
        "drain_us": statistics.median(drains) / 1e3,
        "held_kib": max(held) / 1024,
    }


def gather(per_step: int, ranks: int, steps: int) -> dict[str, float]:
    """Each of ``ranks`` ranks logs ``per_step / ranks`` samples; rank 0 absorbs every part
    and drains, as at an export with a reduce group and the commit after it."""
    rows = workload(per_step // ranks, 0)
    sent, merge, own = [], [], []
    for step in range(steps):
        parts = []
        for rank in range(ranks):
            buffer = SampleBuffer(SamplesConfig(), seed=step * ranks + rank)
            log_all(buffer, rows)
            parts.append(buffer.drain())
        sent.append(max(len(pickle.dumps(part)) for part in parts))
        first = SampleBuffer(SamplesConfig(), seed=step)
        log_all(first, rows)
        t0 = time.thread_time_ns()
        first.drain()
        t1 = time.thread_time_ns()
        log_all(first, rows)
        t2 = time.thread_time_ns()
        first.absorb([p for part in parts[1:] for p in part])
        first.drain()
        t3 = time.thread_time_ns()
        own.append(t1 - t0)
        merge.append(t3 - t2)
    return {
        "sent_kib": max(sent) / 1024,
        "merge_us": statistics.median(merge) / 1e3,
        "drain_us": statistics.median(own) / 1e3,
    }


def request_bytes(per_step: int) -> int:
    """The logs request of one step's kept samples after ``per_step`` were logged."""
    buffer = SampleBuffer(SamplesConfig(), seed=0)
    log_all(buffer, workload(per_step, 0))
    kept = tuple(sample for drained in buffer.drain() for sample in drained.samples)
    return encode_samples(Snapshot((), None, (), 0, "train", kept)).ByteSize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-step", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.per_step} samples a step, {args.steps} steps, medians (thread CPU time)")
    print("| setup | log_sample us/call | scalar us/call | ratio | drain us/step | held KiB |")
    print("|---|---|---|---|---|---|")
    for hook in (False, True):
        r = run(args.per_step, args.steps, hook)
        name = "regex redact hook" if hook else "no hook"
        print(
            f"| {name} | {r['log_sample_us']:.2f} | {r['scalar_us']:.2f} | "
            f"{r['ratio']:.2f}x | {r['drain_us']:.0f} | {r['held_kib']:.0f} |"
        )
    print()
    print("| ranks | KiB one rank sends | rank 0: absorb + drain us | own drain us | ratio |")
    print("|---|---|---|---|---|")
    for ranks in (8, 64):
        g = gather(args.per_step, ranks, args.steps)
        print(
            f"| {ranks} | {g['sent_kib']:.1f} | {g['merge_us']:.0f} | {g['drain_us']:.0f} | "
            f"{g['merge_us'] / g['drain_us']:.1f}x |"
        )
    small, large = request_bytes(100), request_bytes(args.per_step)
    print()
    print(f"logs request of a step: {small} bytes at 100 samples, {large} at {args.per_step}")


if __name__ == "__main__":
    main()
