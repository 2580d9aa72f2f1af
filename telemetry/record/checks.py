"""Checks of what users hand the tracker: each raises at once, naming the full key."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch

from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError

__all__ = ["bucket_bounds", "mask", "moment_state", "stat_value"]

_ACCEPTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def bucket_bounds(key: str, bounds: Sequence[float]) -> tuple[float, ...]:
    """``bounds`` as floats.

    Raises:
        InvalidValueError: they are not strictly increasing finite numbers.
    """
    values = tuple(float(b) for b in bounds)
    if (
        not values
        or any(not math.isfinite(b) for b in values)
        or any(b >= c for b, c in itertools.pairwise(values))
    ):
        raise InvalidValueError(f"{key!r}: bucket bounds must be increasing finite numbers")
    return values


def mask(key: str, value: object) -> torch.Tensor:
    """A denominator's mask.

    Raises:
        MaskTypeError: it is not a boolean tensor.
        InvalidValueError: it is empty.
    """
    if not isinstance(value, torch.Tensor):
        raise MaskTypeError(
            f"denominator {key!r}: expected a bool tensor, got {type(value).__name__}"
        )
    if value.dtype != torch.bool:
        raise MaskTypeError(
            f"denominator {key!r}: mask dtype is {value.dtype}, expected torch.bool "
            "(use mask.bool())"
        )
    if value.numel() == 0:
        raise InvalidValueError(f"denominator {key!r}: empty mask {tuple(value.shape)}")
    return value


def stat_value(key: str, value: object, mask: torch.Tensor, mask_key: str) -> torch.Tensor:
    """A stat's tensor, as a float type the kernel reads (integers become float64).

    Raises:
        InvalidValueError: not a real-number tensor, or on another device than its mask.
        ShapeMismatchError: its shape differs from its denominator's.
    """
    if not isinstance(value, torch.Tensor):
        raise InvalidValueError(f"{key!r}: expected a tensor, got {type(value).__name__}")
    if value.shape != mask.shape:
        raise ShapeMismatchError(
            f"{key!r}: shape {tuple(value.shape)} does not match denominator "
            f"{mask_key!r} shape {tuple(mask.shape)}"
        )
    if value.dtype not in _ACCEPTED_DTYPES:
        if value.dtype == torch.bool or value.is_complex():
            raise InvalidValueError(f"{key!r}: dtype {value.dtype} is not a real number type")
        value = value.to(torch.float64)
    if value.device != mask.device:
        raise InvalidValueError(
            f"{key!r}: tensor on {value.device}, denominator {mask_key!r} on {mask.device}"
        )
    return value


def moment_state(key: str, state: object, n_buckets: int) -> torch.Tensor:
    """A producer's ``[sum, count, min, -max, *buckets]`` state for ``fold_moments``.

    Raises:
        InvalidValueError: not a float64 tensor of ``4 + n_buckets`` elements.
    """
    if (
        not isinstance(state, torch.Tensor)
        or state.dtype != torch.float64
        or state.shape != (4 + n_buckets,)
    ):
        raise InvalidValueError(
            f"{key!r}: expected a float64 state of {4 + n_buckets} elements, got "
            f"{getattr(state, 'dtype', type(state).__name__)} "
            f"{tuple(getattr(state, 'shape', ()))}"
        )
    return state
