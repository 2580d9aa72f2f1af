"""Reusable scratch memory for the kernels' large temporaries on the CPU.

A kernel call needs temporaries as large as its inputs. On the CPU a fresh multi-MiB
tensor comes from the C allocator, which may hand the memory back to the operating
system when it is freed; touching it again then costs a page fault per 4 KiB page. Which
way the allocator goes depends on the process's allocation history: the recording
benchmark took 4,200 page faults and twice the time per step in some processes and not
in others. A :class:`Scratch` keeps one buffer, grown to the largest request up to
``max_bytes``, and carves the temporaries from it, so that the cost does not depend on
luck. Accelerators need none (PyTorch's caching allocator already reuses device memory),
nor do requests above ``max_bytes``: both get fresh tensors.
"""

from __future__ import annotations

import math

import torch

__all__ = ["Scratch"]

_ALIGN = 64
DEFAULT_MAX_BYTES = 32 << 20

Spec = tuple[tuple[int, ...], torch.dtype]


class Scratch:
    """Scratch memory of one device; not thread-safe (each owner serialises its calls).

    Args:
        device: where the temporaries live.
        max_bytes: the largest buffer kept between calls.
    """

    def __init__(self, device: torch.device, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.device = device
        self.max_bytes = max_bytes
        self._buffer: torch.Tensor | None = None

    @property
    def held_bytes(self) -> int:
        """Bytes kept between calls."""
        return 0 if self._buffer is None else self._buffer.numel()

    def tensors(self, *specs: Spec) -> list[torch.Tensor]:
        """Uninitialised tensors of the given ``(shape, dtype)``, valid until the next call."""
        sizes = [-(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN for shape, dtype in specs]
        total = sum(sizes)
        if self.device.type != "cpu" or total > self.max_bytes:
            return [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in specs]
        if self._buffer is None or self._buffer.numel() < total:
            self._buffer = torch.empty(total, dtype=torch.uint8, device=self.device)
        out, offset = [], 0
        for (shape, dtype), size in zip(specs, sizes):
            nbytes = math.prod(shape) * dtype.itemsize
            out.append(self._buffer[offset : offset + nbytes].view(dtype).view(shape))
            offset += size
        return out
