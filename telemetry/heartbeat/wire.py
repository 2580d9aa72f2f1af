"""Beats as a Snapshot of gauges, the form they travel in to the collector (over OTLP).

One snapshot holds one run's beats (the reading rank's view of every rank): per rank a
gauge per :class:`~telemetry.heartbeat.beat.Beat` field, its ``rank``, ``host`` and
``phase`` as point attributes, and the run's stall floor. Its resource names the run
(experiment, trial, role), the reader's worker id (``rltel.worker_id``, a rollout or eval
worker's) and carries :data:`SIGNAL` = ``heartbeat``, which keeps it out of the collector's
step path: the collector keeps only the latest beat per worker and rank and serves it.
The last snapshot of a reader that closes carries :data:`CLOSED`: the collector then
forgets that reader's beats, as an embedded endpoint's beats end with its process.
"""

from __future__ import annotations

import time
from dataclasses import fields

from telemetry.heartbeat.beat import Beat, BeatGroup
from telemetry.model import names
from telemetry.model.snapshot import Attributes, Gauge, Snapshot

__all__ = ["CLOSED", "SIGNAL", "group_of", "is_heartbeat", "snapshot_of"]

SIGNAL = "rltel.signal"
"""The resource attribute that marks a heartbeat snapshot (value ``heartbeat``)."""
PREFIX = "rltel/heartbeat/"
FLOOR = f"{PREFIX}stall_floor_s"
CLOSED = f"{PREFIX}reader_closed"
LABELS = ("rank", "host", "phase")
VALUES = tuple(f.name for f in fields(Beat) if f.name not in LABELS)
"""The Beat fields sent as gauge values (the others are the points' attributes)."""


def is_heartbeat(resource: Attributes) -> bool:
    """Whether a resource's attributes mark a heartbeat snapshot."""
    return any(key == SIGNAL and value == "heartbeat" for key, value in resource)


def snapshot_of(group: BeatGroup, closed: bool = False) -> Snapshot:
    """``group`` as a heartbeat snapshot; ``closed`` when its reader sends its last one."""
    experiment, trial, role = group.run
    points = [Gauge(FLOOR, float(group.stall_floor_s), unit="s")]
    if closed:
        points.append(Gauge(CLOSED, 1.0))
    for beat in group.beats:
        attributes = (("rank", str(beat.rank)), ("host", beat.host), ("phase", beat.phase))
        for name in VALUES:
            points.append(Gauge(PREFIX + name, float(getattr(beat, name)), attributes=attributes))
    resource = (
        (names.EXPERIMENT, experiment),
        (names.TRIAL, trial),
        (names.ROLE, role),
        *(((names.WORKER_ID, group.worker),) if group.worker else ()),
        (SIGNAL, "heartbeat"),
    )
    return Snapshot(points=tuple(points), resource=resource, time_unix_nano=time.time_ns())


def group_of(snapshot: Snapshot) -> tuple[BeatGroup, bool]:
    """The beats of a heartbeat snapshot, and whether its reader closed.

    Raises:
        ValueError: the snapshot is not a whole heartbeat (a missing run name or beat field).
    """
    resource = dict(reversed(snapshot.resource))
    try:
        run = (resource[names.EXPERIMENT], resource[names.TRIAL], resource[names.ROLE])
    except KeyError as exc:
        raise ValueError(f"a heartbeat without the resource attribute {exc}") from None
    floor, closed = None, False
    per_rank: dict[tuple[str, ...], dict[str, float]] = {}
    for point in snapshot.points:
        if point.metric == FLOOR:
            floor = point.value
        elif point.metric == CLOSED:
            closed = point.value == 1.0
        elif point.metric.startswith(PREFIX):
            labels = dict(point.attributes)
            key = tuple(str(labels.get(name, "")) for name in LABELS)
            per_rank.setdefault(key, {})[point.metric[len(PREFIX) :]] = point.value
    if floor is None:
        raise ValueError(f"a heartbeat without {FLOOR}")
    beats = []
    for (rank, host, phase), values in per_rank.items():
        missing = [name for name in VALUES if name not in values]
        if missing or not rank.isdigit():
            raise ValueError(f"heartbeat of rank {rank!r}: missing {', '.join(missing)}")
        numbers = {name: values[name] for name in VALUES}
        numbers["step"] = int(numbers["step"])
        numbers["exited"] = numbers["exited"] == 1.0
        beats.append(Beat(rank=int(rank), host=host, phase=phase, **numbers))
    worker = str(resource.get(names.WORKER_ID, ""))
    return BeatGroup(tuple(str(name) for name in run), floor, tuple(beats), worker), closed
