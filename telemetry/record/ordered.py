"""Float64 minima over ranks through an int64 MIN all-reduce.

A float MIN all-reduce does not propagate NaN reliably (``std::min`` keeps whichever
operand comes first), and has no value above ``+inf`` to mark "this rank has nothing
here". Each float64 is therefore sent as an int64 whose order is the float order
(negative floats have their magnitude bits flipped), every NaN becomes the smallest key
(so it wins, as ``amin`` propagates it), and :data:`ABSENT` is above every float.
Decoding is exact: the minimum's bits come back unchanged.
"""

from __future__ import annotations

import torch

__all__ = ["ABSENT", "decode", "encode"]

ABSENT = torch.iinfo(torch.int64).max
"""The key of "no value": above ``+inf``; decodes to NaN."""
_MAGNITUDE = 0x7FFF_FFFF_FFFF_FFFF
_NAN_BITS = -0x0008_0000_0000_0000  # 0xFFF8...: a NaN with the sign bit set


def encode(values: torch.Tensor, absent: torch.Tensor | None = None) -> torch.Tensor:
    """Order-preserving int64 keys of float64 ``values``; ``absent`` marks :data:`ABSENT`."""
    bits = values.contiguous().view(torch.int64).clone()
    bits[torch.isnan(values)] = _NAN_BITS
    keys = torch.where(bits < 0, bits ^ _MAGNITUDE, bits)
    if absent is not None:
        keys[absent] = ABSENT
    return keys


def decode(keys: torch.Tensor) -> torch.Tensor:
    """The float64 values of ``keys`` (:data:`ABSENT` decodes to NaN)."""
    return torch.where(keys < 0, keys ^ _MAGNITUDE, keys).view(torch.float64)
