"""The step a step-based sink logs a snapshot at."""

from __future__ import annotations

from telemetry.model.snapshot import Snapshot


class StreamSteps:
    """``global_step`` when the snapshot has one; else the stream's own sequence number.

    Step-less rollout/eval snapshots are numbered 0, 1, ... per stream, in arrival order.
    """

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def step_of(self, snapshot: Snapshot) -> int:
        if snapshot.step is not None:
            return snapshot.step.global_step
        seq = self._next.get(snapshot.stream, 0)
        self._next[snapshot.stream] = seq + 1
        return seq
