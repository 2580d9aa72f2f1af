"""Time of ``rltel report`` on a synthetic 200-step run (target: under 10 s).

The run is written through the project's TensorBoard sink (the StatsLogger's writer), not
by the slow demo: per step the demo's key set (PPO stats, train/infer diagnostics,
staleness, advantages, throughput with MFU, timings), per-rank spread keys
(``rank_min``/``rank_max``/``slowest_rank``) for 5 timing/throughput keys, MoE
``max_over_ideal`` for 48 layers, a rollout stream every step and an evaluation every
10 steps. The per-expert loads (48 layers x 64 experts per step) are written as W&B
offline table files in the layout the W&B sink produces (``wandb/<run>/files/media/table/
moe_balance/expert_loads_<step>_<id>.table.json``), since TensorBoard keeps per-layer
summaries only. Each timing runs the installed ``rltel report`` as a user would (a fresh
process: imports, reading, drawing, writing), so it includes interpreter start-up.

    python bench/report_bench.py [--steps 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporters.tensorboard import TensorBoardSink
from telemetry.config import StatsLoggerConfig, TensorBoardConfig
from telemetry.model.snapshot import Gauge, Snapshot, Step

LAYERS, EXPERTS = 48, 64
RLTEL = Path(sys.executable).with_name("rltel")
TRAIN_KEYS = (
    [f"ppo_actor/update/{k}/{r}" for k in ("loss", "importance_weight", "clip_ratio",
                                           "task_reward") for r in ("avg", "min", "max")]
    + ["ppo_actor/update/grad_norm", "ppo_actor/update/lr", "ppo_actor/update/n_valid_tokens"]
    + [f"ppo_actor/train_infer/{k}" for k in (
        "kl_k1", "kl_k2", "kl_k3", "kl_k3_overflow_fraction", "nonfinite_logp_fraction",
        "logp_diff/avg", "logp_diff/min", "logp_diff/max", "logp_abs_diff/avg", "trainer_nll",
        "rollout_nll", "n_valid_tokens", "n_finite_tokens",
        *(f"ratio_outside_{t}" for t in ("1.5", "2", "3", "5", "10")))]
    + [f"ppo_actor/update/version_stats/{k}" for k in (
        "sample_staleness_theta_avg", "sample_staleness_theta_max",
        "sample_staleness_proximal_avg", "sample_staleness_proximal_max",
        "stale_token_fraction", "future_token_fraction")]
    + [f"ppo_actor/advantage_{k}_fraction" for k in ("positive", "negative", "zero")]
    + [f"train_perf/{k}" for k in (
        "tokens", "seconds", "tokens_per_second", "cumulative_tokens_per_second",
        "estimated_flops", "estimated_flops_per_second", "cumulative_estimated_flops_per_second",
        "mfu", "cumulative_mfu", "total_tokens", "total_seconds")]
    + ["timeperf/rollout", "timeperf/train_step", "timeperf/weight_sync"]
    + [f"moe_balance/layer_{i}/max_over_ideal" for i in range(LAYERS)]
)  # fmt: skip
PER_RANK_KEYS = (
    "timeperf/rollout", "timeperf/train_step", "timeperf/weight_sync", "train_perf/seconds",
    "train_perf/tokens",
)  # fmt: skip


def write_run(run_dir: Path, steps: int, seed: int = 0) -> int:
    """A synthetic run under ``run_dir``; returns the number of scalar points written."""
    rng = random.Random(seed)
    sink = TensorBoardSink(
        StatsLoggerConfig(tensorboard=TensorBoardConfig(path=str(run_dir / "tb")))
    )
    tables = run_dir / "wandb" / "offline-run-bench" / "files" / "media" / "table" / "moe_balance"
    tables.mkdir(parents=True)
    points = 0
    for step in range(steps):
        values = [Gauge(k, 1.0 + 0.5 * math.sin(step / 17 + i) + 0.1 * rng.random())
                  for i, k in enumerate(TRAIN_KEYS)]  # fmt: skip
        for key in PER_RANK_KEYS:
            low = rng.uniform(0.5, 1.0)
            values += [Gauge(f"{key}/rank_min", low), Gauge(f"{key}/rank_max", low * 1.3),
                       Gauge(f"{key}/slowest_rank", float(rng.randrange(8)))]  # fmt: skip
        at = Step(0, step, step)
        sink.export(Snapshot(tuple(values), step=at))
        sink.export(Snapshot((Gauge("rollout/reward", 0.3 + step / (2 * steps)),), step=at,
                             stream="rollout"))  # fmt: skip
        points += len(values) + 1
        if step % 10 == 0:
            sink.export(Snapshot((Gauge("eval-rollout/reward", 0.3 + step / (2.2 * steps)),),
                                 step=at, stream="eval"))  # fmt: skip
            points += 1
        rows = []
        for layer in range(LAYERS):
            counts = [rng.random() + 0.2 for _ in range(EXPERTS)]
            total = sum(counts)
            rows += [[layer, e, c * 100, 100 * c / total] for e, c in enumerate(counts)]
        table = {"columns": ["layer", "expert", "tokens", "load_percent"], "data": rows}
        (tables / f"expert_loads_{step}_{step:020x}.table.json").write_text(json.dumps(table))
    sink.shutdown()
    return points


def time_report(*args: str) -> float:
    begin = time.perf_counter()
    result = subprocess.run([str(RLTEL), "report", *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - begin
    if result.returncode != 0:
        raise SystemExit(f"rltel report failed: {result.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rltel-report-bench-"))
    try:
        run = root / "bench" / "trial0"
        begin = time.perf_counter()
        points = write_run(run, args.steps)
        written = time.perf_counter() - begin
        print(f"synthetic run: {args.steps} steps, {points} scalar points, "
              f"{LAYERS}x{EXPERTS} expert tables per step, written in {written:.1f} s")  # fmt: skip
        times = [time_report(str(run), "--out", str(root / "out")) for _ in range(args.repeats)]
        print("rltel report, 1 run: " + ", ".join(f"{t:.2f}" for t in times)
              + f" s (median {statistics.median(times):.2f} s)")  # fmt: skip
        shutil.copytree(run, root / "bench" / "trial1")
        two = time_report(str(run), str(root / "bench" / "trial1"), "--out", str(root / "two"))
        print(f"rltel report, 2 runs overlaid: {two:.2f} s")
        sizes = sorted((p.name, p.stat().st_size) for p in (root / "out").iterdir())
        print("output: " + ", ".join(f"{name} {size // 1024} KiB" for name, size in sizes))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
