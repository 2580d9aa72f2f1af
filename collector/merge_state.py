"""The rollout merger's state as journal records: what a restart needs to merge on.

A checkpoint is one record per worker and stream: a Snapshot on the stream
``rltel.merge/<stream>`` with the worker's resource plus the digest of its last window
(``rltel.merge.digest``), that window's time, the merger's step, and the worker's latest
counter totals as its points. Written after every release (the windows before it are then
in the sinks' journals and are acknowledged), read back in order by a new process: windows
after the last checkpoint are merged again, the checkpoint restores the step (a retried
training step releases nothing twice), the counter sums over workers, and each worker's
last window (its retried request is recognised as a duplicate).
"""

from __future__ import annotations

from dataclasses import dataclass

from telemetry.model.snapshot import Attributes, Counter, Snapshot, Step

__all__ = ["STREAM_PREFIX", "WorkerState", "read", "record"]

STREAM_PREFIX = "rltel.merge/"
DIGEST = "rltel.merge.digest"


@dataclass(frozen=True, slots=True)
class WorkerState:
    """One worker's part of a checkpoint."""

    stream: str
    worker: Attributes
    time_unix_nano: int
    digest: str
    step: Step | None
    counters: tuple[Counter, ...]


def record(state: WorkerState) -> Snapshot:
    """``state`` as a journal record."""
    resource = (*state.worker, (DIGEST, state.digest))
    return Snapshot(
        state.counters, state.step, resource, state.time_unix_nano, STREAM_PREFIX + state.stream
    )


def read(snapshot: Snapshot) -> WorkerState | None:
    """The checkpoint part ``snapshot`` holds; None for a window."""
    if not snapshot.stream.startswith(STREAM_PREFIX):
        return None
    worker = tuple((k, v) for k, v in snapshot.resource if k != DIGEST)
    digest = str(snapshot.resource_value(DIGEST, ""))
    counters = tuple(p for p in snapshot.points if isinstance(p, Counter))
    return WorkerState(
        snapshot.stream.removeprefix(STREAM_PREFIX),
        worker,
        snapshot.time_unix_nano,
        digest,
        snapshot.step,
        counters,
    )
