"""GPU health of this rank's device through NVML (``pip install rltel[nvml]``).

Utilisation, memory used and free share, power, temperature, SM clock, and whether the
clocks are held down for thermal or power reasons, read at export. Without the
``nvidia-ml-py`` package or the NVML library, :func:`open_device` logs one line and returns
None: no series.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Protocol

__all__ = ["GpuReader", "NvmlDevice", "open_device"]

_log = logging.getLogger(__name__)
THERMAL = ("SwThermalSlowdown", "HwThermalSlowdown")
POWER = ("SwPowerCap", "HwPowerBrakeSlowdown")


class GpuReader(Protocol):
    """Reads one GPU: ``read()`` returns the readings by name (those of :class:`NvmlDevice`)."""

    def read(self) -> dict[str, float]: ...


class NvmlDevice:
    """One GPU's NVML readings."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle
        self._thermal = _mask(nvml, THERMAL)
        self._power = _mask(nvml, POWER)

    def read(self) -> dict[str, float]:
        """The device's readings now (``gpu/...`` names)."""
        nvml, handle = self._nvml, self._handle
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        return {
            "utilization_percent": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "memory_used_bytes": float(memory.used),
            "memory_free_ratio": memory.free / memory.total if memory.total else 0.0,
            "power_watts": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temperature_celsius": float(
                nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
            ),
            "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "throttle_thermal": float(bool(reasons & self._thermal)),
            "throttle_power": float(bool(reasons & self._power)),
        }


def _mask(nvml: Any, names: tuple[str, ...]) -> int:
    mask = 0
    for name in names:
        mask |= int(getattr(nvml, f"nvmlClocksThrottleReason{name}", 0))
    return mask


def open_device() -> NvmlDevice | None:
    """This rank's GPU through NVML: the CUDA device in use (by UUID), else ``LOCAL_RANK``;
    None (and one log line) when NVML is not there."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        handle = _handle(nvml)
        NvmlDevice(nvml, handle).read()
    except Exception as exc:  # no package, no library, no device: no series
        _log.info("hardware: no NVML GPU readings (%s: %s)", type(exc).__name__, exc)
        return None
    return NvmlDevice(nvml, handle)


def _handle(nvml: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return nvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("LOCAL_RANK", "0")))
