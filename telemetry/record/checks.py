"""Checks of what users hand the tracker: each raises at once, naming the full key."""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.model.snapshot import StatReduce

__all__ = [
    "bucket_bounds",
    "mask",
    "moment_buckets",
    "moment_rows",
    "reduce_group",
    "scalar_value",
    "stat_reduce",
    "stat_value",
]

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


def moment_buckets(key: str, counts: object, n_buckets: int) -> torch.Tensor:
    """A producer's bucket counts of one key for ``fold_moment_rows``.

    Raises:
        InvalidValueError: not a float64 tensor of ``n_buckets`` elements.
    """
    if (
        not isinstance(counts, torch.Tensor)
        or counts.dtype != torch.float64
        or counts.shape != (n_buckets,)
    ):
        raise InvalidValueError(
            f"{key!r}: expected a float64 bucket-count vector of {n_buckets} elements, got "
            f"{getattr(counts, 'dtype', type(counts).__name__)} "
            f"{tuple(getattr(counts, 'shape', ()))}"
        )
    return counts


def moment_rows(keys: Sequence[str], rows: object) -> torch.Tensor:
    """Producers' ``[K, 4]`` states ``[sum, count, min, -max]`` for ``fold_moment_rows``.

    Raises:
        InvalidValueError: not a float64 tensor of one row per key, naming the first key.
    """
    if (
        not isinstance(rows, torch.Tensor)
        or rows.dtype != torch.float64
        or rows.shape != (len(keys), 4)
    ):
        first = keys[0] if keys else "?"
        raise InvalidValueError(
            f"{first!r}: expected float64 states of shape {(len(keys), 4)}, got "
            f"{getattr(rows, 'dtype', type(rows).__name__)} "
            f"{tuple(getattr(rows, 'shape', ()))}"
        )
    return rows


def scalar_value(key: str, value: object) -> float | torch.Tensor:
    """A ``scalar()`` value: a float, or a one-element tensor kept on its device (no sync).

    AReaL records ``float(value)``; this accepts the same real numbers: Python and numpy
    numbers, bools (0.0/1.0), 0-d arrays and one-element tensors of a real or bool dtype.

    Raises:
        InvalidValueError: anything else (strings, None, complex numbers, several elements).
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InvalidValueError(
                f"scalar {key!r}: expected one element, got shape {tuple(value.shape)}"
            )
        if value.is_complex():
            raise InvalidValueError(f"scalar {key!r}: dtype {value.dtype} is not a real number")
        return value
    if isinstance(value, np.ndarray):
        if value.ndim != 0:  # float() refuses these too (numpy 2)
            raise InvalidValueError(
                f"scalar {key!r}: expected a number or a 0-d array, got shape {value.shape}"
            )
        value = value.item()
    if isinstance(value, (numbers.Real, np.bool_)):
        return float(value)
    raise InvalidValueError(f"scalar {key!r}: expected a real number, got {type(value).__name__}")


def reduce_group(key: str, group: object) -> None:
    """A per-key ``reduce_group``: None or a ``torch.distributed`` process group.

    Raises:
        InvalidValueError: anything else, naming the first key of the call.
    """
    if group is None:
        return
    process_group = getattr(dist, "ProcessGroup", None)
    if process_group is None or not isinstance(group, process_group):
        raise InvalidValueError(
            f"{key!r}: reduce_group must be a torch.distributed process group or None, "
            f"got {type(group).__name__}"
        )


def stat_reduce(key: str, reduce_type: object) -> StatReduce:
    """A ``stat()``'s reduce type: AVG_MIN_MAX for None, else any but SCALAR.

    Raises:
        InvalidValueError: not a reduce type, or SCALAR, naming the first key of the call.
    """
    if reduce_type is None:
        return StatReduce.AVG_MIN_MAX
    if not isinstance(reduce_type, StatReduce) or reduce_type is StatReduce.SCALAR:
        given = reduce_type.name if isinstance(reduce_type, StatReduce) else repr(reduce_type)
        raise InvalidValueError(
            f"{key!r}: reduce type {given} is not valid for stat(); "
            "use ReduceType.AVG_MIN_MAX, AVG, SUM, MIN or MAX"
        )
    return reduce_type
