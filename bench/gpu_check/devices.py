"""Checks 5-7, on a GPU only: memory per phase, NVML readings, train_perf's timing and peak."""

from __future__ import annotations

import shutil
import subprocess
import time

import torch

from bench.gpu_check.outcome import Context, Skip

__all__ = ["memory_per_phase", "nvml_readings", "train_perf"]

MIB = 2**20
# NVML against nvidia-smi read right after it: how far each reading may be.
TOLERANCE = {"utilization_percent": 30.0, "memory_used_bytes": 64.0 * MIB,
             "power_watts": 50.0, "temperature_celsius": 3.0, "sm_clock_mhz": 300.0}  # fmt: skip
SMI_FIELDS = ("utilization.gpu", "memory.used", "power.draw", "temperature.gpu", "clocks.sm")
SMI_SCALE = (1.0, MIB, 1.0, 1.0, 1.0)  # nvidia-smi's units (MiB for memory) to NVML's
THROTTLE = {"throttle_thermal": ("sw_thermal_slowdown", "hw_thermal_slowdown"),
            "throttle_power": ("sw_power_cap", "hw_power_brake_slowdown")}  # fmt: skip


def _needs_cuda(ctx: Context) -> None:
    if not ctx.cuda:
        raise Skip("no CUDA device")


def memory_per_phase(ctx: Context) -> tuple[str, dict]:
    """Check 5: a phase's peaks as the memory producer reports them equal the allocator's."""
    _needs_cuda(ctx)
    from telemetry.metrics.hardware import HardwareSource
    from telemetry.record import stats_tracker

    torch.cuda.init()
    source = HardwareSource(nvml=False)
    try:
        stats_tracker.export_all()  # a fresh window
        torch.cuda.reset_peak_memory_stats()
        with stats_tracker.record_timing("gpu_check_alloc"):
            a = torch.randn(4096, 4096, device="cuda")
            b = a @ a
            torch.cuda.synchronize()
            want = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
            del a, b
        stats = stats_tracker.export_all()
    finally:
        source.close()
    key = "hardware/phase/gpu_check_alloc"
    got = stats[f"{key}/peak_allocated_bytes"], stats[f"{key}/peak_reserved_bytes"]
    assert got == tuple(float(x) for x in want), f"reported {got}, allocator {want}"
    return (
        f"phase peak allocated {got[0] / MIB:.0f} MiB, reserved {got[1] / MIB:.0f} MiB: "
        "= torch.cuda.max_memory_*",
        {"peak_allocated_bytes": got[0], "peak_reserved_bytes": got[1]},
    )


def _smi(fields: list[str]) -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
         "-i", str(torch.cuda.current_device())],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return [part.strip() for part in out.split(",")]


def _smi_throttle() -> dict[str, bool]:
    names = [n for pair in THROTTLE.values() for n in pair]
    for prefix in ("clocks_throttle_reasons", "clocks_event_reasons"):  # renamed in 535
        try:
            values = _smi([f"{prefix}.{n}" for n in names])
        except subprocess.CalledProcessError:
            continue
        active = dict(zip(names, (v == "Active" for v in values)))
        return {key: any(active[n] for n in pair) for key, pair in THROTTLE.items()}
    raise AssertionError("nvidia-smi knows neither throttle nor event reason fields")


def nvml_readings(ctx: Context) -> tuple[str, dict]:
    """Check 6: NVML readings within :data:`TOLERANCE` of nvidia-smi at the same moment."""
    _needs_cuda(ctx)
    if shutil.which("nvidia-smi") is None:
        raise AssertionError("a CUDA device but no nvidia-smi to compare with")
    from telemetry.metrics.nvml import open_device

    torch.cuda.init()
    device = open_device()
    assert device is not None, "NVML did not open this device (pip install rltel[nvml])"
    reading = device.read()
    smi = _smi(list(SMI_FIELDS))
    throttled = _smi_throttle()
    diffs = {}
    for (name, tolerance), text, scale in zip(TOLERANCE.items(), smi, SMI_SCALE):
        diffs[name] = abs(reading[name] - float(text) * scale)
        assert diffs[name] <= tolerance, f"{name}: NVML {reading[name]}, nvidia-smi {text}"
    for key, active in throttled.items():
        assert reading[key] == float(active), f"{key}: NVML {reading[key]}, nvidia-smi {active}"
    return (
        "utilisation, memory, power, temperature, SM clock within tolerance; throttle "
        f"reasons as nvidia-smi's ({', '.join(k for k, v in throttled.items() if v) or 'none'})",
        {"nvml": reading, "differences": diffs, "tolerance": TOLERANCE},
    )


def train_perf(ctx: Context) -> tuple[str, dict]:
    """Check 7: train_perf's CUDA-event seconds against a synchronised wall clock, and the
    MFU peak the device table picks for this device's name."""
    _needs_cuda(ctx)
    from telemetry.metrics.peak_flops import device_peak_flops, lookup
    from telemetry.metrics.train_perf import TrainPerf
    from telemetry.record.export import export_sources

    perf = TrainPerf(register=False, device="cuda")
    model = torch.nn.Linear(8192, 8192, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(8192, 8192, device="cuda")
    mask = torch.ones(8, 512, dtype=torch.bool, device="cuda")
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(30):
        with perf.measure(mask):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - begin
    stats = export_sources([perf])
    seconds = stats["train_perf/seconds"]
    assert stats["train_perf/tokens"] == 30 * 8 * 512
    assert abs(seconds - wall) <= 0.05 * wall, f"events {seconds:.4f} s, wall {wall:.4f} s"
    name = torch.cuda.get_device_name()
    entry = lookup(name)
    peak = device_peak_flops()
    assert peak == (entry.bf16 if entry else None), (name, entry, peak)
    picked = f"{entry.name}, {entry.bf16 / 1e12:g} TFLOP/s dense BF16" if entry else "none"
    return (
        f"events {seconds:.3f} s vs synchronised wall {wall:.3f} s; "
        f"MFU peak for {name!r}: {picked}",
        {"event_seconds": seconds, "wall_seconds": wall, "device_name": name,
         "peak_entry": entry.name if entry else None, "peak_flops": peak},
    )  # fmt: skip
