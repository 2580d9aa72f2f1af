"""Check 8: rltel never touches the user's CUDA state or torch's global settings.

A fresh interpreter reads torch's global settings, imports rltel, builds a StatsLogger
with every sink (W&B and SwanLab offline, Trackio local, TensorBoard, Prometheus, console,
hardware with NVML, tracing), records, exports and commits steps while its background
threads run, closes it, and reads the settings again. CUDA must still be uninitialised
then; after the user's first CUDA call, only the current device may hold a context of
this process (NVML's list of compute processes per device).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.gpu_check.outcome import Context

__all__ = ["user_state"]

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = r"""
import json, os, sys, tempfile
import torch

def settings():
    return {
        "default_dtype": str(torch.get_default_dtype()),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "grad_enabled": torch.is_grad_enabled(),
        "num_threads": torch.get_num_threads(),
    }

before = settings()
from rltel import StatsLogger
from telemetry import stats_tracker

run = tempfile.mkdtemp()
logger = StatsLogger({
    "experiment_name": "gpu-check", "trial_name": "t0", "fileroot": run,
    "wandb": {"mode": "offline", "project": "gpu-check"},
    "swanlab": {"mode": "offline", "project": "gpu-check"},
    "trackio": {"mode": "local", "project": "gpu-check"},
    "tensorboard": {"path": os.path.join(run, "tensorboard")},
    "prometheus": {"enabled": True, "port": 0},
    "console": {"enabled": False},
    "hardware": {"enabled": True},
})
for step in range(3):
    mask = torch.rand(4, 64) < 0.7
    with stats_tracker.record_timing("step"), stats_tracker.scope("actor"):
        stats_tracker.denominator(n=mask)
        stats_tracker.stat(loss=torch.randn(4, 64), denominator="n")
    logger.commit(epoch=0, epoch_step=step, global_step=step, data=stats_tracker.export_all())
logger.fanout.force_flush(60.0)
initialised = torch.cuda.is_initialized()
after = settings()
logger.close()
out = {"before": before, "after": after, "after_close": settings(),
       "cuda_initialised": initialised or torch.cuda.is_initialized()}
if torch.cuda.is_available():
    device, stream = torch.cuda.current_device(), torch.cuda.current_stream()
    torch.zeros(1, device="cuda")  # the user's first CUDA call
    import pynvml
    pynvml.nvmlInit()
    out["contexts"] = [
        index for index in range(pynvml.nvmlDeviceGetCount())
        if any(p.pid == os.getpid() for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
            pynvml.nvmlDeviceGetHandleByIndex(index)))
    ]
    out["device"] = device
    out["same_stream"] = torch.cuda.current_stream() == stream == torch.cuda.default_stream()
print("RESULT " + json.dumps(out))
"""


def user_state(ctx: Context) -> tuple[str, dict]:
    """Check 8 (the global settings part also on the CPU)."""
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET], cwd=ROOT, capture_output=True, text=True, timeout=150
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {done.stderr[-2000:]}"
    out = json.loads(lines[-1].removeprefix("RESULT "))
    changed = {
        name: (value, out[when][name])
        for when in ("after", "after_close")
        for name, value in out["before"].items()
        if out[when][name] != value
    }
    assert not changed, f"global torch settings changed: {changed}"
    assert not out["cuda_initialised"], "CUDA was initialised before the user's first call"
    detail = f"{len(out['before'])} global settings unchanged, CUDA not initialised"
    if ctx.cuda:
        assert out["same_stream"], "the current stream changed"
        detail += "; current stream unchanged"
        if out["contexts"]:
            assert out["contexts"] == [out["device"]], f"contexts on devices {out['contexts']}"
            detail += f"; one context, on device {out['device']}"
        else:  # a PID namespace: NVML lists the host's pids, not this one
            detail += "; contexts not placed (NVML does not list this pid)"
    else:
        detail += " (no CUDA: the context and stream parts skipped)"
    return detail, {"settings": out["before"], "cuda_initialised": out["cuda_initialised"]}
