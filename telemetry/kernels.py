"""The masked-moment kernel: fold one ``stat()`` call's tensors into their states at once.

A call's K tensors share one mask. :func:`fold` returns the K updated states
``[sum, count, min, -max]`` (float64) given the current ones, without reading any value
on the host and without a compiler: plain ATen ops on the caller's thread.

The tensors are stacked into one ``[K, N]`` block (viewed without a copy when they are
consecutive rows of one buffer) and read a few times, branch-free:

* padding is cleared by a bitwise AND of the values' bits with the mask's bits (0 or
  all ones), so a NaN or inf on padding never reaches a sum, while a NaN or ±inf on a
  valid element is kept exactly;
* the sums are one float64 reduction of the cleared block;
* padding is then filled with the row's value at one valid position (an integer
  multiply-add of the bits), so a single block serves both ``amin`` and ``amax``.

Selecting with a boolean mask (``torch.where``, ``masked_fill``) is avoided on purpose:
on CPU it runs a branch per element, which mispredicts on irregular masks and was
measured 20x slower than the bitwise form (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["MaskBits", "fold", "fold_block", "stacked_view"]

_INF = float("inf")
_BITS_OF_SIZE = {2: torch.int16, 4: torch.int32, 8: torch.int64}


class MaskBits:
    """A boolean mask with its valid count and, made on first need, its flat bit forms.

    Args:
        mask: the boolean mask (any shape; the kernel reads it flattened).
        count: its number of True elements, a float64 0-d tensor on the mask's device.
    """

    __slots__ = ("_bits", "_valid_index", "count", "mask")

    def __init__(self, mask: torch.Tensor, count: torch.Tensor) -> None:
        self.mask = mask
        self.count = count.reshape(())
        self._bits: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._valid_index: torch.Tensor | None = None

    def bits(self, itemsize: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keep, drop)`` as integers of ``itemsize`` bytes.

        ``keep`` has all bits set where the mask is True and none elsewhere; ``drop`` is
        1 where the mask is False and 0 elsewhere.
        """
        cached = self._bits.get(itemsize)
        if cached is None:
            dtype = _BITS_OF_SIZE[itemsize]
            flat = self.mask.reshape(-1)
            cached = (flat.to(dtype).neg_(), (~flat).to(dtype))
            self._bits[itemsize] = cached
        return cached

    def valid_index(self) -> torch.Tensor:
        """A 1-element int64 tensor: the last valid position (0 when none is valid)."""
        if self._valid_index is None:
            keep, _ = self.bits(4)
            positions = torch.arange(keep.numel(), dtype=torch.int32, device=keep.device)
            self._valid_index = (keep & positions).amax().to(torch.int64).reshape(1)
        return self._valid_index


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


def fold(states: torch.Tensor, masks: MaskBits, xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Updated ``[K, 4]`` states of the 1-D tensors ``xs`` (one float dtype) over ``masks``.

    Args:
        states: the current ``[K, 4]`` float64 states ``[sum, count, min, -max]``.
        masks: the mask the tensors share, with its count.
        xs: K tensors with the mask's length; never modified.
    """
    block = stacked_view(xs)
    return fold_block(states, masks, block, scratch=block.data_ptr() != xs[0].data_ptr())


def fold_block(
    states: torch.Tensor, masks: MaskBits, block: torch.Tensor, scratch: bool
) -> torch.Tensor:
    """:func:`fold` of a contiguous ``[K, N]`` block.

    With ``scratch`` the block is the caller's temporary and is overwritten (its valid
    elements keep their values; padding takes other values), which saves a copy.
    """
    keep, drop = masks.bits(block.element_size())
    raw = block.view(keep.dtype)
    cleared = raw.bitwise_and_(keep) if scratch else raw & keep  # padding -> +0.0
    total = cleared.view(block.dtype).sum(1, dtype=torch.float64)
    # Padding takes the row's value at a valid position: then min and max of the whole
    # row are those of its valid elements (nothing is valid: corrected below).
    cleared.addcmul_(cleared.index_select(1, masks.valid_index()), drop)
    filled = cleared.view(block.dtype)
    any_valid = masks.count > 0
    low = torch.where(any_valid, filled.amin(1).to(torch.float64), _INF)
    negated_high = torch.where(any_valid, filled.amax(1).to(torch.float64).neg(), _INF)
    return torch.stack(
        [
            states[:, 0] + total,
            states[:, 1] + masks.count,
            torch.minimum(states[:, 2], low),
            torch.minimum(states[:, 3], negated_high),
        ],
        dim=1,
    )
