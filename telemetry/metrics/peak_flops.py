"""Peak dense tensor FLOP/s of current accelerators, for MFU, chosen from the device name.

Every figure is the vendor datasheet's number for dense math, per device. NVIDIA's
datasheets print the Hopper and Blackwell tensor figures *with 2:4 sparsity* (footnote
"with sparsity"); the dense figure used here is half of it. AMD prints both. A100 has no
FP8 (``None``). A device that no entry matches gets no figure: MFU is then left out, never
guessed from a neighbour (an unmarked "H100" could be SXM or PCIe, 989 vs 756 TFLOP/s).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import torch

from telemetry.model.errors import ConfigError

logger = logging.getLogger(__name__)

PRECISIONS = ("bf16", "fp16", "fp8")
T = 1e12


@dataclass(frozen=True, slots=True)
class PeakFlops:
    """Dense peak FLOP/s of one accelerator per precision; ``fp8`` None where unsupported."""

    name: str
    bf16: float
    fp16: float
    fp8: float | None


# (pattern on the upper-cased device name, entry); the first match wins, so the specific
# form factors (PCIe, NVL) come before the SXM default that their names also contain.
PEAK_TABLE: tuple[tuple[str, PeakFlops], ...] = (
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/): BF16/FP16
    # Tensor Core 312 TFLOPS (624 with sparsity), same for 40/80 GB, SXM4 and PCIe; no FP8.
    (r"\bA100\b", PeakFlops("A100", 312 * T, 312 * T, None)),
    # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), H100 PCIe
    # column: BF16/FP16 1,513 and FP8 3,026 TFLOPS with sparsity -> 756.5 / 1,513 dense.
    (r"\bH100\b.*\bPCIE\b", PeakFlops("H100 PCIe", 756.5 * T, 756.5 * T, 1513 * T)),
    # Same datasheet, H100 NVL column: 1,671 / 3,341 TFLOPS with sparsity -> 835.5 / 1,670.5.
    (r"\bH100\b.*\bNVL\b", PeakFlops("H100 NVL", 835.5 * T, 835.5 * T, 1670.5 * T)),
    # Same datasheet, H100 SXM column: BF16/FP16 1,979 and FP8 3,958 TFLOPS with sparsity
    # -> 989.5 / 1,979 dense. Its driver name is "NVIDIA H100 80GB HBM3" (SXM5) or names SXM.
    (r"\bH100\b.*\b(SXM\w*|HBM3)\b", PeakFlops("H100 SXM", 989.5 * T, 989.5 * T, 1979 * T)),
    # NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), H200 NVL
    # column: 1,671 / 3,341 TFLOPS with sparsity -> 835.5 / 1,670.5 dense.
    (r"\bH200\b.*\bNVL\b", PeakFlops("H200 NVL", 835.5 * T, 835.5 * T, 1670.5 * T)),
    # Same datasheet, H200 SXM column: 1,979 / 3,958 TFLOPS with sparsity -> 989.5 / 1,979.
    # H200 ships as SXM or NVL only; the SXM part reports "NVIDIA H200".
    (r"\bH200\b", PeakFlops("H200 SXM", 989.5 * T, 989.5 * T, 1979 * T)),
    # NVIDIA HGX platform specifications (nvidia.com/en-us/data-center/hgx/), HGX B200,
    # per GPU: FP16/BF16 4.5 PFLOPS and FP8 9 PFLOPS with sparsity -> 2.25 / 4.5 dense.
    # "\bB200" does not match GB200 (a different, 1.2 kW part).
    (r"\bB200\b", PeakFlops("B200", 2250 * T, 2250 * T, 4500 * T)),
    # AMD Instinct MI300X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi300x):
    # peak FP16/BF16 1,307.4 TFLOPS and FP8 2,614.9 TFLOPS dense (sparsity doubles them).
    (r"\bMI300X\b", PeakFlops("MI300X", 1307.4 * T, 1307.4 * T, 2614.9 * T)),
    # AMD Instinct MI325X data sheet (amd.com/en/products/accelerators/instinct/mi300/mi325x):
    # the same dense peaks as MI300X, 1,307.4 / 2,614.9 TFLOPS.
    (r"\bMI325X\b", PeakFlops("MI325X", 1307.4 * T, 1307.4 * T, 2614.9 * T)),
)
_COMPILED = tuple((re.compile(pattern), entry) for pattern, entry in PEAK_TABLE)
_logged: set[tuple[str, str]] = set()


def lookup(device_name: str) -> PeakFlops | None:
    """The table entry for a device name (``torch.cuda.get_device_name()``), or None."""
    name = device_name.upper()
    return next((entry for pattern, entry in _COMPILED if pattern.search(name)), None)


def peak_flops_for_name(device_name: str, precision: str = "bf16") -> float | None:
    """Dense peak FLOP/s of ``device_name`` at ``precision``; None when not in the table.

    Raises:
        ConfigError: ``precision`` is not one of ``bf16``, ``fp16``, ``fp8``.
    """
    if precision not in PRECISIONS:
        raise ConfigError(f"peak FLOP/s precision must be one of {PRECISIONS}, got {precision!r}")
    entry = lookup(device_name)
    return None if entry is None else getattr(entry, precision)


def device_name(device: torch.device) -> str:
    """The accelerator's name as the driver reports it; ``"cpu"`` for a CPU device."""
    if device.type != "cuda":
        return device.type
    return torch.cuda.get_device_name(device)


def device_peak_flops(
    device: torch.device | str | None = None, precision: str = "bf16"
) -> float | None:
    """Dense peak FLOP/s of ``device`` (default: the current CUDA device, else CPU).

    A device with no figure (not in the table, a CPU, an FP8 request on A100) returns
    None and logs one INFO line per device name and precision in the process.

    Raises:
        ConfigError: unknown ``precision``.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    name = device_name(torch.device(device))
    peak = peak_flops_for_name(name, precision)
    if peak is None and (name, precision) not in _logged:
        _logged.add((name, precision))
        logger.info(
            "train_perf: no %s peak FLOP/s known for device %r; MFU is off "
            "(pass peak_flops_per_device to enable it)",
            precision,
            name,
        )
    return peak
