"""Masked-moment kernels: fold one ``stat()`` call's tensors into their states at once.

A call's K tensors share one mask. ``fold`` returns the K updated states
``[sum, count, min, -max]`` (float64) given the current ones, without reading any value
on the host. Two implementations compute the same numbers:

* eager, per tensor, with the boolean mask (``torch.where``): always available;
* fused, compiled with ``torch.compile`` (dynamic shapes, one graph per dtype and device
  type, whatever K and the tensor size): the K tensors are stacked (viewed without a copy
  when they are consecutive rows of one buffer) and read once, with a
  float copy of the mask (inductor vectorises float masks far better than bool ones).

The fused kernel is compiled on a background thread at first use, while the eager one
serves; where compilation fails the eager kernel stays in use. ``RLTEL_COMPILE=0`` keeps
the eager kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from telemetry.compiling import BackgroundCompiled, compile_mode, wait_for_compilations

__all__ = ["compile_mode", "fold", "fold_eager", "fused_kernel", "stacked_view", "wait_for_kernels"]

_INF = float("inf")

Fold = Callable[..., torch.Tensor]


def _combine(states: torch.Tensor, count: torch.Tensor, moments: torch.Tensor) -> torch.Tensor:
    """New states from old ``[K, 4]`` states, the mask count and ``[K, 3]`` moments."""
    return torch.stack(
        [
            states[:, 0] + moments[:, 0],
            states[:, 1] + count,
            torch.minimum(states[:, 2], moments[:, 1]),
            torch.minimum(states[:, 3], moments[:, 2]),
        ],
        dim=1,
    )


def fold_eager(
    states: torch.Tensor, count: torch.Tensor, mask: torch.Tensor, xs: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The eager kernel: ``[sum, min, -max]`` of each tensor over the bool ``mask``."""
    moments = []
    for x in xs:
        total = torch.where(mask, x, 0).sum(dtype=torch.float64)
        low = torch.where(mask, x, _INF).amin().to(torch.float64)
        high = torch.where(mask, x, -_INF).amax().to(torch.float64)
        moments.append(torch.stack([total, low, -high]))
    return _combine(states, count, torch.stack(moments))


def _fold_stacked(
    states: torch.Tensor, count: torch.Tensor, float_mask: torch.Tensor, stacked: torch.Tensor
) -> torch.Tensor:
    """The fusable kernel over ``stacked`` ``[K, N]``; ``float_mask`` is 1.0 where valid."""
    keep = float_mask > 0
    total = torch.where(keep, stacked, 0.0).to(torch.float64).sum(1)
    low = torch.where(keep, stacked, _INF).amin(1).to(torch.float64)
    high = torch.where(keep, stacked, -_INF).amax(1).to(torch.float64)
    return _combine(states, count, torch.stack([total, low, -high], dim=1))


def _warm_up(kernel: Fold, key: tuple[torch.dtype, str]) -> None:
    dtype, device_type = key
    for k, n in ((2, 17), (3, 33)):  # two shapes: the graph must be shape-generic
        states = torch.zeros(k, 4, dtype=torch.float64, device=device_type)
        count = torch.zeros((), dtype=torch.float64, device=device_type)
        stacked = torch.zeros(k, n, dtype=dtype, device=device_type)
        kernel(states, count, torch.ones(n, device=device_type), stacked)


_fused = BackgroundCompiled(_fold_stacked, _warm_up, "fused stat kernel")


def fused_kernel(dtype: torch.dtype, device: torch.device) -> Fold | None:
    """The compiled kernel for ``dtype`` on ``device`` if ready; starts compiling it if not."""
    return _fused.get((dtype, device.type))


def wait_for_kernels(timeout_s: float | None = None) -> bool:
    """Block until background compilations finish (benchmarks, tests); True if all did."""
    return wait_for_compilations(timeout_s)


def stacked_view(xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(xs)`` of equal 1-D tensors; a view when they are rows of one buffer."""
    first = xs[0]
    n = first.numel()
    base = first.untyped_storage().data_ptr()
    for i, x in enumerate(xs):
        if (
            x.stride() != (1,)
            or x.storage_offset() != first.storage_offset() + i * n
            or x.untyped_storage().data_ptr() != base
        ):
            return torch.stack(list(xs))
    return first.as_strided((len(xs), n), (n, 1))


def fold(
    states: torch.Tensor,
    count: torch.Tensor,
    mask: torch.Tensor,
    float_mask: Callable[[], torch.Tensor],
    xs: Sequence[torch.Tensor],
) -> torch.Tensor:
    """Updated ``[K, 4]`` states of 1-D tensors ``xs`` (one dtype) over the 1-D ``mask``.

    ``float_mask()`` gives the mask as float32; it is only called for the fused kernel.
    """
    kernel = fused_kernel(xs[0].dtype, xs[0].device) if xs[0].numel() > 1 else None
    if kernel is None:
        return fold_eager(states, count, mask, xs)
    return kernel(states, count, float_mask(), stacked_view(xs))
