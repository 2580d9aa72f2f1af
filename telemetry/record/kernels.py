"""The masked-moment kernel: fold one ``stat()`` call's tensors into their states at once.

A call's K tensors share one mask. :func:`fold` returns the K updated states
``[sum, count, min, -max]`` (float64) given the current ones, without reading any value
on the host and without a compiler: plain ATen ops on the caller's thread.

The tensors are read as one ``[K, N]`` block, branch-free:

* padding is cleared by a bitwise AND of the values' bits with the mask's bits (0 or
  all ones), so a NaN or inf on padding never reaches a sum, while a NaN or ±inf on a
  valid element is kept exactly; separate tensors are stacked by this AND itself, rows
  of one buffer are read in place;
* the sums are one float64 reduction of the cleared block;
* padding is then set to +inf (bitwise OR) for ``amin``, and flipped to -inf (XOR of
  the sign bit) for ``amax``, in place.

Selecting with a boolean mask (``torch.where``, ``masked_fill``) is avoided on purpose:
on CPU it runs a branch per element, which mispredicts on irregular masks and was
measured 20x slower than the bitwise form (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from telemetry.record.scratch import Scratch

__all__ = ["MaskBits", "fold", "fold_block", "rows_view"]

_BITS_OF_SIZE = {2: torch.int16, 4: torch.int32, 8: torch.int64}


@functools.cache
def _inf_and_sign_bits(dtype: torch.dtype) -> tuple[int, int]:
    """The bits of +inf and of the sign in ``dtype``, as signed integers of the same size."""
    bits = torch.tensor([float("inf"), -0.0], dtype=dtype).view(_BITS_OF_SIZE[dtype.itemsize])
    return int(bits[0]), int(bits[1])


class MaskBits:
    """A boolean mask with its valid count and, made on first need, its flat bit forms.

    Args:
        mask: the boolean mask (any shape; the kernel reads it flattened).
        count: its number of True elements, a float64 0-d tensor on the mask's device.
    """

    __slots__ = ("_fills", "_keep", "count", "mask")

    def __init__(self, mask: torch.Tensor, count: torch.Tensor) -> None:
        self.mask = mask
        self.count = count.reshape(())
        self._keep: dict[int, torch.Tensor] = {}
        self._fills: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(self, itemsize: int) -> torch.Tensor:
        """Integers of ``itemsize`` bytes: all bits set where the mask is True, none elsewhere."""
        keep = self._keep.get(itemsize)
        if keep is None:
            keep = self.mask.reshape(-1).to(_BITS_OF_SIZE[itemsize]).neg_()
            self._keep[itemsize] = keep
        return keep

    def fills(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(+inf, sign)`` bits of ``dtype`` on padding and 0 on valid elements.

        OR-ing the first into cleared values puts +inf on padding; XOR-ing the second
        then turns it into -inf.
        """
        fills = self._fills.get(dtype)
        if fills is None:
            padding = ~self.keep(dtype.itemsize)
            inf, sign = _inf_and_sign_bits(dtype)
            fills = (padding & inf, padding & sign)
            self._fills[dtype] = fills
        return fills


def rows_view(xs: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """``xs`` (equal 1-D tensors) as one ``[K, N]`` view when they are consecutive rows of
    one buffer, else None."""
    first = xs[0]
    n = first.numel()
    base = first.untyped_storage().data_ptr()
    for i, x in enumerate(xs):
        if (
            x.stride() != (1,)
            or x.storage_offset() != first.storage_offset() + i * n
            or x.untyped_storage().data_ptr() != base
        ):
            return None
    return first.as_strided((len(xs), n), (n, 1))


def fold(
    states: torch.Tensor, masks: MaskBits, xs: Sequence[torch.Tensor], scratch: Scratch
) -> torch.Tensor:
    """Updated ``[K, 4]`` states of the 1-D tensors ``xs`` (one float dtype) over ``masks``.

    Args:
        states: the current ``[K, 4]`` float64 states ``[sum, count, min, -max]``.
        masks: the mask the tensors share, with its count.
        xs: K tensors with the mask's length; never modified.
        scratch: where the temporaries live.
    """
    view = rows_view(xs)
    if view is not None:
        return fold_block(states, masks, view, scratch, overwrite=False)
    keep = masks.keep(xs[0].element_size())
    shape, dtype = (len(xs), xs[0].numel()), xs[0].dtype
    cleared, *wide = scratch.tensors((shape, keep.dtype), *_widened(shape, dtype))
    for row, x in zip(cleared, xs):  # stacking and clearing in one pass
        torch.bitwise_and(x.contiguous().view(keep.dtype), keep, out=row)
    return _fold_cleared(states, masks, cleared, dtype, *wide)


def fold_block(
    states: torch.Tensor,
    masks: MaskBits,
    block: torch.Tensor,
    scratch: Scratch,
    overwrite: bool,
) -> torch.Tensor:
    """:func:`fold` of a ``[K, N]`` block with contiguous rows.

    With ``overwrite`` the block is the caller's temporary and is overwritten, which
    saves a copy: its valid elements keep their values, padding ends at -inf.
    """
    keep = masks.keep(block.element_size())
    raw = block.view(keep.dtype)
    shape = tuple(raw.shape)
    if overwrite:
        wide = scratch.tensors(*_widened(shape, block.dtype))
        cleared = raw.bitwise_and_(keep)
    else:
        cleared, *wide = scratch.tensors((shape, keep.dtype), *_widened(shape, block.dtype))
        torch.bitwise_and(raw, keep, out=cleared)
    return _fold_cleared(states, masks, cleared, block.dtype, *wide)


def _widened(
    shape: tuple[int, ...], dtype: torch.dtype
) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """The float64 copy a sum of ``dtype`` values needs (none for float64)."""
    return [] if dtype == torch.float64 else [(shape, torch.float64)]


def _fold_cleared(
    states: torch.Tensor,
    masks: MaskBits,
    cleared: torch.Tensor,
    dtype: torch.dtype,
    wide: torch.Tensor | None = None,
) -> torch.Tensor:
    """The states from ``cleared``, the values' bits with padding set to +0.0.

    ``cleared`` is overwritten: padding ends at -inf, valid elements keep their values.
    ``wide`` is float64 room for the values: ``sum(dtype=float64)`` would allocate it.
    """
    values = cleared.view(dtype)
    total = values.sum(1) if wide is None else wide.copy_(values).sum(1)
    # Padding at +inf cannot be a row's minimum, at -inf not its maximum; with no valid
    # element the extremes are +inf and -inf, the empty state.
    positive_inf, sign = masks.fills(dtype)
    low = cleared.bitwise_or_(positive_inf).view(dtype).amin(1)
    high = cleared.bitwise_xor_(sign).view(dtype).amax(1)
    extremes = torch.stack([low, high.neg()], 1).to(torch.float64)
    return torch.cat(
        [
            states[:, :2] + torch.stack([total, masks.count.expand_as(total)], 1),
            torch.minimum(states[:, 2:], extremes),
        ],
        1,
    )
