"""A :class:`Batch` (a Snapshot with the start times its OTLP encoding needs) and its JSON
form: each metric entry of the OTLP sink's spool (:mod:`exporters.otlp.spool`) and each
record of the collector's durable journal (:mod:`exporters.journal`).

Plain data and ``json`` only, no OpenTelemetry: the journal under the generic queue reads
and writes its records without loading the OTLP encoder. The step is written before the
points, so a reader of an entry's head finds it (:meth:`exporters.otlp.spool.Spool.steps`).

A ``ScalarMean`` is written as a ``gauge`` entry with its ``count`` (a ``Gauge``'s count is
null), the form every earlier version wrote and reads: spools and journals stay readable
both ways across an upgrade.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    Point,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)

__all__ = [
    "FORMAT",
    "Batch",
    "batch_from_dict",
    "batch_from_json",
    "batch_to_json",
    "plain_attribute",
]

FORMAT = 1
"""The JSON form's ``format`` (a trace or logs spool entry is format 2)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One OTLP request's worth of a Snapshot, with the start times the encoding needs.

    ``window_start_unix_nano`` starts the DELTA points (histograms, trainer scalars);
    ``start_unix_nano`` is the process start: it starts Counters that carry none and, when
    ``cumulative_scalars`` is set, the scalar streams, which then hold running totals.
    """

    snapshot: Snapshot
    window_start_unix_nano: int = 0
    start_unix_nano: int = 0
    cumulative_scalars: bool = False

    @property
    def num_points(self) -> int:
        return len(self.snapshot.points)


def plain_attribute(value: object) -> str | bool | int | float:
    """``value`` as str, bool, int or float (numpy and torch scalars unwrapped)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return plain_attribute(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def batch_to_json(batch: Batch) -> str:
    """The batch as JSON text (non-finite floats written as NaN/Infinity)."""
    snapshot = batch.snapshot
    step = snapshot.step
    return json.dumps(
        {
            "format": FORMAT,
            "window_start": batch.window_start_unix_nano,
            "start": batch.start_unix_nano,
            "cumulative_scalars": batch.cumulative_scalars,
            "time": snapshot.time_unix_nano,
            "stream": snapshot.stream,
            "resource": [[name, plain_attribute(value)] for name, value in snapshot.resource],
            "step": None if step is None else [step.epoch, step.epoch_step, step.global_step],
            "points": [_point_to_dict(point) for point in snapshot.points],
        },
        separators=(",", ":"),
    )


def batch_from_json(text: str) -> Batch:
    """The batch written by :func:`batch_to_json`.

    Raises:
        ValueError: the text is not a spool entry of this format.
    """
    return batch_from_dict(json.loads(text))


def batch_from_dict(data: dict[str, Any]) -> Batch:
    """The batch of a parsed :func:`batch_to_json` text.

    Raises:
        ValueError: ``data`` is not a batch of this format.
    """
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown spool format {data.get('format')!r}")
    step = data["step"]
    snapshot = Snapshot(
        points=tuple(_point_from_dict(point) for point in data["points"]),
        step=None if step is None else Step(*step),
        resource=tuple((name, value) for name, value in data["resource"]),
        time_unix_nano=data["time"],
        stream=data["stream"],
    )
    return Batch(snapshot, data["window_start"], data["start"], data["cumulative_scalars"])


def _point_to_dict(point: Point) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metric": point.metric,
        "unit": point.unit,
        "attributes": [[name, plain_attribute(value)] for name, value in point.attributes],
    }
    if isinstance(point, Histogram):
        out.update(
            kind="histogram",
            count=int(point.count),
            sum=float(point.sum),
            min=None if point.min is None else float(point.min),
            max=None if point.max is None else float(point.max),
            bounds=[float(bound) for bound in point.bounds],
            bucket_counts=[int(count) for count in point.bucket_counts],
            reduce=point.reduce.value,
        )
    elif isinstance(point, Counter):
        out.update(kind="counter", value=float(point.value), start=point.start_time_unix_nano)
    elif isinstance(point, ScalarMean):
        out.update(kind="gauge", value=float(point.value), count=int(point.count))
    else:
        out.update(kind="gauge", value=float(point.value), count=None)
    return out


def _point_from_dict(data: dict[str, Any]) -> Point:
    common = {
        "metric": data["metric"],
        "unit": data["unit"],
        "attributes": tuple((name, value) for name, value in data["attributes"]),
    }
    kind = data["kind"]
    if kind == "histogram":
        return Histogram(
            count=data["count"],
            sum=data["sum"],
            min=data["min"],
            max=data["max"],
            bounds=tuple(data["bounds"]),
            bucket_counts=tuple(data["bucket_counts"]),
            reduce=StatReduce(data["reduce"]),
            **common,
        )
    if kind == "counter":
        return Counter(value=data["value"], start_time_unix_nano=data["start"], **common)
    if kind == "gauge" and data["count"] is not None:
        return ScalarMean(value=data["value"], count=data["count"], **common)
    if kind == "gauge":
        return Gauge(value=data["value"], **common)
    raise ValueError(f"unknown point kind {kind!r}")
