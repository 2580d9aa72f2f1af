"""Compact on-device accumulators: O(1) state per key, no device-to-host sync.

A masked statistic keeps one float64 vector on the input's device:
``[sum, count, min, -max, *bucket_counts]``. Storing ``-max`` lets one ``minimum``
update both extrema; the layout tells the DP reduction which element takes which op.
Nothing here reads a tensor value on the host, so recording never synchronises.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

import torch

from telemetry.reduce import ReduceOp, StateLayout

_log = logging.getLogger(__name__)
_INF = float("inf")
STAT_OPS = (ReduceOp.SUM, ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MIN)
SCALAR_LAYOUT = StateLayout("scalar", STAT_OPS)
DENOMINATOR_LAYOUT = StateLayout("denominator", (ReduceOp.SUM,))


def stat_layout(reduce: str, n_buckets: int) -> StateLayout:
    """Layout of a masked stat with ``n_buckets`` bucket counts (0 for none)."""
    return StateLayout(f"stat:{reduce}:b{n_buckets}", STAT_OPS + (ReduceOp.SUM,) * n_buckets)


def _moments_eager(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[sum, min, -max]`` of ``x`` over ``mask`` as float64, one unfused op at a time."""
    total = torch.where(mask, x, 0).sum(dtype=torch.float64)
    low = torch.where(mask, x, _INF).amin().to(torch.float64)
    high = torch.where(mask, x, -_INF).amax().to(torch.float64)
    return torch.stack([total, low, -high])


def _moments_fusable(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The same as :func:`_moments_eager`, written so that inductor fuses it into one pass."""
    xd = x.to(torch.float64)
    total = torch.where(mask, xd, 0.0).sum()
    low = torch.where(mask, xd, _INF).amin()
    high = torch.where(mask, xd, -_INF).amax()
    return torch.stack([total, low, -high])


MomentsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_kernels: dict[tuple[torch.dtype, str], MomentsFn] = {}
_compiling: dict[tuple[torch.dtype, str], threading.Thread] = {}
_kernels_lock = threading.Lock()


def compile_mode() -> str:
    """``RLTEL_COMPILE``: ``auto`` (default) compiles the fused kernel in the background.

    ``0`` (or ``off``) keeps the eager kernel.
    """
    mode = os.environ.get("RLTEL_COMPILE", "auto")
    return "off" if mode in ("0", "off", "false") else "auto"


_compile_lock = threading.Lock()  # inductor's lazy imports are not thread-safe


def _compile_kernel(key: tuple[torch.dtype, str]) -> None:
    dtype, device_type = key
    try:
        with _compile_lock:
            kernel = torch.compile(_moments_fusable, dynamic=True)
            for n in (17, 33):  # two sizes: the graph must already be shape-generic
                x = torch.zeros(n, dtype=dtype, device=device_type)
                kernel(x, torch.ones(n, dtype=torch.bool, device=device_type))
    except Exception as exc:  # no compiler toolchain, unsupported backend, ...
        _log.warning(
            "rltel: fused stat kernel unavailable for %s on %s (%s); using eager",
            dtype,
            device_type,
            exc,
        )
        kernel = _moments_eager
    with _kernels_lock:
        _kernels[key] = kernel


def moments_fn(x: torch.Tensor) -> MomentsFn:
    """The masked-moments kernel for ``x``'s dtype and device.

    The fused ``torch.compile`` kernel (one pass over ``x`` and the mask) is compiled on a
    background thread at first use, with dynamic shapes so that later shapes reuse it;
    until it is ready, and wherever compilation fails, the eager kernel is used. Inputs
    are flattened to 1-D so that the tensor's rank does not cause recompiles.
    """
    if compile_mode() == "off":
        return _moments_eager
    key = (x.dtype, x.device.type)
    kernel = _kernels.get(key)
    if kernel is not None:
        return kernel
    with _kernels_lock:
        if key not in _compiling and key not in _kernels:
            thread = threading.Thread(
                target=_compile_kernel, args=(key,), name="rltel-compile", daemon=True
            )
            _compiling[key] = thread
            thread.start()
    return _moments_eager


def wait_for_kernels(timeout_s: float | None = None) -> bool:
    """Block until background compilations finish (benchmarks, tests); True if all did."""
    for thread in list(_compiling.values()):
        thread.join(timeout_s)
    return all(not t.is_alive() for t in _compiling.values())


def bucket_counts(x: torch.Tensor, mask: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """OTel explicit-bucket counts over ``mask``: bucket i is ``(bounds[i-1], bounds[i]]``.

    NaN values land in the last bucket so that the counts add up to the mask count.
    """
    index = torch.bucketize(x.detach(), bounds, right=False)
    index = torch.where(torch.isnan(x), bounds.numel(), index)
    counts = torch.zeros(bounds.numel() + 1, dtype=torch.float64, device=x.device)
    return counts.scatter_add_(0, index.reshape(-1), mask.reshape(-1).to(torch.float64))


def new_stat_state(device: torch.device, n_buckets: int) -> torch.Tensor:
    """The empty state of a masked stat: sum 0, count 0, min +inf, -max +inf, buckets 0."""
    state = torch.zeros(4 + n_buckets, dtype=torch.float64, device=device)
    state[2:4] = _INF
    return state


def update_stat_state(state: torch.Tensor, moments: torch.Tensor, count: torch.Tensor) -> None:
    """Fold one call's ``[sum, min, -max]`` and mask ``count`` into ``state`` in place."""
    state[0] += moments[0]
    state[1] += count
    torch.minimum(state[2:4], moments[1:3], out=state[2:4])


def record_masked(
    states: Sequence[torch.Tensor],
    tensors: Sequence[torch.Tensor],
    mask: torch.Tensor,
    count: torch.Tensor,
    bounds: Sequence[torch.Tensor | None],
) -> None:
    """Accumulate each tensor over ``mask`` into its state (same order), on device."""
    flat_mask = mask.reshape(-1)
    for state, x, key_bounds in zip(states, tensors, bounds):
        x = x.detach()
        kernel = moments_fn(x) if x.numel() > 1 else _moments_eager
        update_stat_state(state, kernel(x.reshape(-1), flat_mask), count)
        if key_bounds is not None:
            state[4:] += bucket_counts(x, mask, key_bounds)


class ScalarState:
    """Running ``[sum, count, min, -max]`` of a scalar stream, kept on the host.

    Python numbers are folded in as floats; tensors are folded in on their device
    without a sync and joined with the host part at export.
    """

    __slots__ = ("_device_state", "_host")

    def __init__(self) -> None:
        self._host = [0.0, 0.0, _INF, _INF]
        self._device_state: torch.Tensor | None = None

    def add(self, value: float) -> None:
        host = self._host
        host[0] += value
        host[1] += 1.0
        # Comparisons with NaN are False: propagate NaN explicitly, as torch does.
        host[2] = value if (value != value or value < host[2]) else host[2]
        negated = -value
        host[3] = negated if (negated != negated or negated < host[3]) else host[3]

    def add_tensor(self, value: torch.Tensor) -> None:
        value = value.detach().reshape(()).to(torch.float64)
        if self._device_state is None:
            self._device_state = new_stat_state(value.device, 0)
        update_stat_state(
            self._device_state, torch.stack([value, value, -value]), torch.ones_like(value)
        )

    def state(self) -> torch.Tensor:
        """The combined state as a float64 tensor (one copy from the device, if any)."""
        host = torch.tensor(self._host, dtype=torch.float64)
        if self._device_state is None:
            return host
        device = self._device_state.cpu()
        out = host.clone()
        out[:2] += device[:2]
        torch.minimum(out[2:4], device[2:4], out=out[2:4])
        return out
