"""Reading OTLP protobuf values: attributes, numbers and histogram points.

Helpers of :mod:`telemetry.otlp.decode`. A value that cannot be mapped raises :class:`Rejected`
with the reason; the decoder counts it and goes on. Names and attributes are checked against
:class:`~telemetry.config.LabelLimits` (the collector's ``limits`` section).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from telemetry.config import LabelLimits
from telemetry.model.snapshot import AttributeValue
from telemetry.otlp.temporality import HistogramState


class Rejected(Exception):
    """One data point that cannot be mapped; the message says why."""


class OverLimit(Rejected):
    """A name or attribute over one of :class:`LabelLimits`; ``limit`` names it."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


UNLIMITED = LabelLimits(2**62, 2**62, 2**62, 2**62)
"""No bound: the default of :func:`attributes`."""


def attributes(kvs: Sequence, limits: LabelLimits = UNLIMITED) -> tuple:
    """OTLP ``KeyValue`` list -> Snapshot attributes (plain str/bool/int/float values).

    Raises:
        OverLimit: too many attributes, or a key or value too long.
    """
    items = kvs[:]  # [:]: see Decoder._resource
    if len(items) > limits.max_attributes_per_point:
        raise OverLimit(
            "max_attributes_per_point",
            f"{len(items)} attributes; max_attributes_per_point is "
            f"{limits.max_attributes_per_point}",
        )
    max_key, max_value = limits.max_attribute_key_length, limits.max_attribute_value_length
    out = []
    for kv in items:
        key = kv.key
        if len(key) > max_key:
            raise OverLimit(
                "max_attribute_key_length",
                f"attribute key of {len(key)} characters; max_attribute_key_length is {max_key}",
            )
        value = plain(kv.value, max_value)
        if isinstance(value, str) and len(value) > max_value:
            raise OverLimit(
                "max_attribute_value_length",
                f"attribute {key[:64]!r}: value of {len(value)} characters; "
                f"max_attribute_value_length is {max_value}",
            )
        out.append((key, value))
    return tuple(out)


def _too_long(n: int, limit: int) -> None:
    if n > limit:
        raise OverLimit(
            "max_attribute_value_length",
            f"attribute value of {n}+ characters; max_attribute_value_length is {limit}",
        )


def plain(value: AnyValue, limit: int = 2**62) -> AttributeValue:
    """The value as a Python scalar; arrays and maps as text, checked against ``limit``
    before they are built (each element takes at least one character)."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        return value.double_value
    if which == "bool_value":
        return value.bool_value
    if which == "array_value":
        values = value.array_value.values
        _too_long(len(values), limit)
        return "[" + ",".join(str(plain(v, limit)) for v in values[:]) + "]"
    if which == "kvlist_value":
        values = value.kvlist_value.values
        _too_long(len(values), limit)
        return "{" + ",".join(f"{kv.key}={plain(kv.value, limit)}" for kv in values[:]) + "}"
    if which == "bytes_value":
        _too_long(2 * len(value.bytes_value), limit)
        return value.bytes_value.hex()
    return ""


def number(point) -> float:
    """The value of a ``NumberDataPoint`` (int or double) as a float.

    Raises:
        Rejected: the point has no value.
    """
    value = point.as_double
    if value:  # a set as_int reads 0.0 here: only an exact 0.0 needs the oneof
        return value
    which = point.WhichOneof("value")
    if which == "as_double":
        return value
    if which == "as_int":
        return float(point.as_int)
    raise Rejected("a number data point without a value")


def explicit(point) -> HistogramState:
    """A ``HistogramDataPoint`` as read, its buckets checked against its bounds and count.

    A non-finite sum (a NaN loss, an infinite KL) is kept: it is the sender's value, shown
    as the embedded path shows it.

    Raises:
        Rejected: inconsistent buckets, or bounds not finite and strictly increasing.
    """
    bounds = tuple(point.explicit_bounds)
    buckets = tuple(point.bucket_counts)
    if bounds:
        if len(buckets) != len(bounds) + 1:
            raise Rejected(f"{len(bounds)} bounds need {len(bounds) + 1} bucket counts")
        if not _increasing(bounds):
            raise Rejected("histogram bounds are not finite and strictly increasing")
        if sum(buckets) != point.count:
            raise Rejected(f"bucket counts sum to {sum(buckets)}, count is {point.count}")
    else:
        buckets = ()
    return HistogramState(
        point.start_time_unix_nano,
        point.count,
        _hist_sum(point),
        point.min if point.HasField("min") else None,
        point.max if point.HasField("max") else None,
        bounds,
        buckets,
    )


def exponential(point) -> HistogramState:
    """Exponential buckets as explicit ones: bucket ``i`` covers ``(base**i, base**(i+1)]``.

    Buckets that floats cannot bound exactly (overflow, too fine a scale) are dropped;
    count, sum (finite or not), min and max are kept.
    """
    try:
        bounds, counts = _exponential_buckets(point)
    except (OverflowError, ZeroDivisionError):
        bounds, counts = [], []
    if not _increasing(bounds) or sum(counts) != point.count:
        bounds, counts = [], []
    return HistogramState(
        point.start_time_unix_nano,
        point.count,
        _hist_sum(point),
        point.min if point.HasField("min") else None,
        point.max if point.HasField("max") else None,
        tuple(bounds),
        tuple(counts),
    )


def _exponential_buckets(point) -> tuple[list[float], list[int]]:
    base = 2.0 ** (2.0**-point.scale)
    bounds: list[float] = []
    counts: list[int] = []
    negative = list(point.negative.bucket_counts)
    if negative:
        top = point.negative.offset + len(negative)
        bounds.append(-(base**top))
        counts.append(0)
        for index in range(len(negative) - 1, -1, -1):
            bounds.append(-(base ** (point.negative.offset + index)))
            counts.append(negative[index])
    bounds.append(0.0)
    counts.append(point.zero_count)
    positive = list(point.positive.bucket_counts)
    if positive:
        bounds.append(base**point.positive.offset)
        counts.append(0)
        for index, count in enumerate(positive):
            bounds.append(base ** (point.positive.offset + index + 1))
            counts.append(count)
    counts.append(0)
    return bounds, counts


def _increasing(bounds: Iterable[float]) -> bool:
    """True when ``bounds`` are finite and strictly increasing."""
    values = list(bounds)
    return all(map(math.isfinite, values)) and all(lo < hi for lo, hi in itertools.pairwise(values))


def _hist_sum(point) -> float:
    """The point's sum as sent, non-finite included; unset: NaN when it counted values."""
    if not point.HasField("sum"):
        return math.nan if point.count else 0.0
    return point.sum
