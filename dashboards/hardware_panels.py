"""The GPU panels of the Hardware row: each rank's NVML readings at export.

One line per rank of ``hardware/gpu/<reading>/per_rank`` (:mod:`telemetry.metrics.nvml`):
utilisation, memory used and free share (the headroom ``RLGpuMemoryHeadroomLow`` reads),
power, temperature, SM clock, and the thermal and power throttle flags the throttling
alerts read. Without NVML (a CPU-only machine) the panels are empty.
"""

from __future__ import annotations

from collections.abc import Callable

from dashboards import catalog as c
from dashboards.alerts import GPU_MEMORY_FREE_MIN
from dashboards.panels import Panel, Query, timeseries

__all__ = ["gpu_panels"]

RANK = "rank {{rank}}"


def gpu_panels(select: Callable[[str], str]) -> list[Panel]:
    """The GPU panels; ``select(name)`` adds the run's label matchers to a series name."""

    def per_rank(title: str, metric: c.Metric, unit: str, description: str) -> Panel:
        return timeseries(
            title, Query(select(metric.name), RANK), unit=unit, description=description
        )

    return [
        per_rank(
            "GPU utilisation per rank",
            c.GPU_UTILIZATION,
            "percent",
            "hardware/gpu/utilization_percent: the share of the last sample period in which "
            "a kernel ran on the rank's GPU (NVML).",
        ),
        per_rank(
            "GPU memory used per rank",
            c.GPU_MEMORY_USED,
            "bytes",
            "hardware/gpu/memory_used_bytes: device memory in use on the rank's GPU, every "
            "process on it (NVML); the allocator's own peaks are hardware/memory/peak_*.",
        ),
        per_rank(
            "GPU memory headroom per rank",
            c.GPU_MEMORY_FREE,
            "percentunit",
            "hardware/gpu/memory_free_ratio: free over total device memory; "
            f"RLGpuMemoryHeadroomLow fires under {GPU_MEMORY_FREE_MIN:.0%} for 5 minutes.",
        ),
        per_rank(
            "GPU power per rank",
            c.GPU_POWER,
            "watt",
            "hardware/gpu/power_watts: the board's power draw.",
        ),
        per_rank(
            "GPU temperature per rank",
            c.GPU_TEMPERATURE,
            "celsius",
            "hardware/gpu/temperature_celsius: the GPU die temperature.",
        ),
        per_rank(
            "SM clock per rank",
            c.GPU_SM_CLOCK,
            "rotmhz",
            "hardware/gpu/sm_clock_mhz: the streaming multiprocessors' clock; a rank held "
            "below the others is throttled (next panel).",
        ),
        timeseries(
            "Clock throttling per rank",
            Query(select(c.GPU_THROTTLE_THERMAL.name), f"thermal {RANK}"),
            Query(select(c.GPU_THROTTLE_POWER.name), f"power {RANK}"),
            unit="none",
            description="1 while NVML reports the clocks held down for heat (software or "
            "hardware thermal slowdown) or power (power cap, power-brake slowdown): "
            "RLGpuThermalThrottling and RLGpuPowerThrottling after 5 minutes.",
        ),
    ]
