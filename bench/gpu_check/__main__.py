"""``scripts/gpu-check``: rltel's CUDA, NCCL and NVML paths, checked in one command.

Prints one line per check and a final ``N passed, N failed, N skipped`` line; exits 1 when a
check failed. Without CUDA every check with a CPU meaning runs on the CPU and the others
say why they skipped. The figures go to a JSON file (``--json``), which
``python -m bench.gpu_check.benchmarks_md`` turns into docs/BENCHMARKS.md's section.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.gpu_check import collectives, devices, hygiene, recording
from bench.gpu_check.outcome import Check, Context, Outcome, run_check

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JSON = ROOT / ".cache" / "gpu-check" / "result.json"  # .cache/ is git-ignored
BUDGET_S = 330  # a check starts only within this; the slowest (8) takes under 30 s here
CHECKS: dict[str, Check] = {
    "1 no host sync while recording": recording.no_host_sync,
    "2 cost on the device": recording.cost,
    "3 values as on the CPU": recording.values,
    "4 reduction and collectives": collectives.reduction,
    "5 memory per phase": devices.memory_per_phase,
    "6 NVML readings": devices.nvml_readings,
    "7 train_perf on CUDA": devices.train_perf,
    "8 user's CUDA state untouched": hygiene.user_state,
}


def context() -> Context:
    """This machine: the current CUDA device when there is one, else the CPU."""
    if torch.cuda.is_available():
        return Context(f"cuda:{torch.cuda.current_device()}", True, torch.cuda.device_count())
    return Context("cpu", False, 0)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and the cores this process may use."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")),
                 platform.machine())  # fmt: skip
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def machine(ctx: Context) -> dict:
    """What the JSON says the figures were measured on."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    name = torch.cuda.get_device_name() if ctx.cuda else cpu_name()
    return {"device": ctx.device, "device_name": name, "cuda": ctx.cuda, "gpus": ctx.gpus,
            "torch": torch.__version__, "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip


def summary(outcomes: list[Outcome]) -> str:
    """The last line: ``N passed, N failed`` and, when any, ``, N skipped``."""
    count = {s: sum(o.status == s for o in outcomes) for s in ("passed", "failed", "skipped")}
    line = f"{count['passed']} passed, {count['failed']} failed"
    return line + (f", {count['skipped']} skipped" if count["skipped"] else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="figures file")
    parser.add_argument("--only", nargs="*", type=int, help="check numbers to run (default all)")
    args = parser.parse_args(argv)
    ctx = context()
    info = machine(ctx)
    print(f"gpu-check on {info['device_name']} ({ctx.device}), torch {info['torch']}", flush=True)
    outcomes = []
    start = time.monotonic()
    for name, check in CHECKS.items():
        if args.only and int(name.split()[0]) not in args.only:
            continue
        if time.monotonic() - start > BUDGET_S:
            outcomes.append(Outcome(name, "failed", f"not run: {BUDGET_S} s spent", 0.0))
        else:
            outcomes.append(run_check(name, check, ctx))
        print(outcomes[-1].line(), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    report = {**info, "checks": [dataclasses.asdict(o) for o in outcomes]}
    args.json.write_text(json.dumps(report, indent=1, default=float) + "\n")
    print(f"figures: {args.json}")
    print(summary(outcomes), flush=True)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
