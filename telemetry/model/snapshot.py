"""The Snapshot: one export of one process, the data model every stage shares.

A Snapshot holds plain Python values only (no tensors, no protobuf). The recording
side produces it, the OTLP encoder/decoder converts it, the collector and every sink
consume it. Points are frozen; change them with :func:`dataclasses.replace`.

Key names are AReaL's. A point's ``metric`` is its OpenTelemetry instrument name; its
``attributes`` distinguish series of one instrument (for example ``layer``/``expert``
of MoE balance). The flat AReaL key of a point is derived from both by :func:`flat_key`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum

from telemetry.model import names
from telemetry.model.run import run_name
from telemetry.model.sample import Sample

AttributeValue = str | bool | int | float
Attributes = tuple[tuple[str, AttributeValue], ...]

COUNT_SUFFIX = "__count"


class StatReduce(str, Enum):
    """A recorded key's reduce type: how its point appears in AReaL's flat dict.

    The one reduce-type enum; ``telemetry.record.stats_tracker.ReduceType`` is this enum under
    AReaL's name. ``SCALAR`` is a scalar stream (a :class:`ScalarMean`);
    the others are a :class:`Histogram`'s (``AVG_MIN_MAX``: ``/avg``, ``/min``, ``/max``).
    """

    AVG_MIN_MAX = "avg_min_max"
    AVG = "avg"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    SCALAR = "scalar"


def flat_key(metric: str, attributes: Attributes = ()) -> str:
    """AReaL key of a series: attributes become ``name_value`` segments before the leaf.

    ``flat_key("moe_balance/max_over_ideal", (("layer", 3),))`` is
    ``"moe_balance/layer_3/max_over_ideal"``.
    """
    if not attributes:
        return metric
    parent, _, leaf = metric.rpartition("/")
    segments = [f"{name}_{value}" for name, value in attributes]
    return "/".join([*([parent] if parent else []), *segments, leaf])


@dataclass(frozen=True, slots=True)
class Gauge:
    """A point-in-time value: the level of a series when it was read.

    ``unit`` and ``attributes`` are keyword-only: a positional third argument (the count
    a scalar stream had before it was a :class:`ScalarMean`) raises ``TypeError``.
    """

    metric: str
    value: float
    unit: str = field(default="", kw_only=True)
    attributes: Attributes = field(default=(), kw_only=True)

    @property
    def key(self) -> str:
        return flat_key(self.metric, self.attributes)

    def flat(self) -> Iterator[tuple[str, float]]:
        yield self.key, self.value


@dataclass(frozen=True, slots=True)
class ScalarMean:
    """A scalar stream of one export (AReaL's ``stats_tracker`` scalar): the count-weighted
    mean of the values recorded, and how many there were."""

    metric: str
    value: float
    count: int
    unit: str = ""
    attributes: Attributes = ()

    @property
    def key(self) -> str:
        return flat_key(self.metric, self.attributes)

    def flat(self) -> Iterator[tuple[str, float]]:
        """The flat entries: the mean, and ``key__count`` (an int, as AReaL's)."""
        yield self.key, self.value
        yield self.key + COUNT_SUFFIX, int(self.count)


@dataclass(frozen=True, slots=True)
class Counter:
    """A monotonic cumulative total (tokens, seconds, FLOPs) since ``start_time_unix_nano``."""

    metric: str
    value: float
    unit: str = ""
    attributes: Attributes = ()
    start_time_unix_nano: int = 0

    @property
    def key(self) -> str:
        return flat_key(self.metric, self.attributes)

    def flat(self) -> Iterator[tuple[str, float]]:
        yield self.key, self.value


@dataclass(frozen=True, slots=True)
class Histogram:
    """A masked token statistic of one export: count (mask sum), sum, min, max, buckets.

    ``min``/``max`` are ``None`` when ``count`` is 0. ``bucket_counts`` has one more entry
    than ``bounds`` (the last bucket is ``(bounds[-1], +inf]``), or both are empty.
    ``reduce`` selects the keys of the flat view (AReaL's reduce type; not ``SCALAR``).
    """

    metric: str
    count: int
    sum: float
    min: float | None = None
    max: float | None = None
    bounds: tuple[float, ...] = ()
    bucket_counts: tuple[int, ...] = ()
    reduce: StatReduce = StatReduce.AVG_MIN_MAX
    unit: str = ""
    attributes: Attributes = ()

    def __post_init__(self) -> None:
        if self.reduce is StatReduce.SCALAR:
            raise ValueError(f"histogram {self.metric!r}: a scalar stream is a ScalarMean")
        if self.bounds and len(self.bucket_counts) != len(self.bounds) + 1:
            raise ValueError(
                f"histogram {self.metric!r}: {len(self.bounds)} bounds need "
                f"{len(self.bounds) + 1} bucket counts, got {len(self.bucket_counts)}"
            )

    @property
    def key(self) -> str:
        return flat_key(self.metric, self.attributes)

    @property
    def avg(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def flat(self) -> Iterator[tuple[str, float]]:
        key = self.key
        if self.reduce is StatReduce.SUM:
            yield key, self.sum
            return
        if self.count <= 0:
            return
        if self.reduce is StatReduce.AVG_MIN_MAX:
            yield key + "/avg", self.sum / self.count
            yield key + "/min", _or_nan(self.min)
            yield key + "/max", _or_nan(self.max)
        elif self.reduce is StatReduce.AVG:
            yield key, self.sum / self.count
        elif self.reduce is StatReduce.MIN:
            yield key, _or_nan(self.min)
        elif self.reduce is StatReduce.MAX:
            yield key, _or_nan(self.max)


Point = Gauge | ScalarMean | Counter | Histogram


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def flatten(points: Iterable[Point], include_counts: bool = False) -> dict[str, float]:
    """AReaL's flat dict of ``points``; ``__count`` companions only if ``include_counts``."""
    out: dict[str, float] = {}
    for point in points:
        for key, value in point.flat():
            if include_counts or not key.endswith(COUNT_SUFFIX):
                out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class Step:
    """The training position an export belongs to."""

    epoch: int
    epoch_step: int
    global_step: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One export: a step's points plus the resource attributes of the process that made it."""

    points: tuple[Point, ...]
    step: Step | None = None
    resource: Attributes = ()
    time_unix_nano: int = 0
    stream: str = field(default="train")
    samples: tuple[Sample, ...] = ()
    """The step's kept rollout samples (:mod:`telemetry.samples`), for the sinks that show them."""

    def flat(self, include_counts: bool = False) -> dict[str, float]:
        """AReaL's flat dict; ``__count`` keys are internal and excluded unless asked for."""
        return flatten(self.points, include_counts=include_counts)

    def resource_value(self, name: str, default: AttributeValue | None = None):
        """The value of one resource attribute, or ``default``."""
        for key, value in self.resource:
            if key == name:
                return value
        return default

    @property
    def run_id(self) -> str:
        """``<experiment>_<trial>``: the experiment-tracker run this snapshot belongs to."""
        experiment = self.resource_value(names.EXPERIMENT, "default")
        trial = self.resource_value(names.TRIAL, "default")
        return run_name(str(experiment), str(trial))
