"""An in-memory :class:`~exporters.base.Overflow` for the queue's tests."""

from __future__ import annotations

from exporters.base import ExportResult, Overflow, Sink
from telemetry.model.snapshot import Snapshot


class ListOverflow(Overflow):
    """Keeps spilled snapshots in a list; replays the oldest through its sink."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.entries: list[Snapshot] = []
        self.spilled = 0

    def __len__(self) -> int:
        return len(self.entries)

    def spill(self, snapshot: Snapshot) -> None:
        self.entries.append(snapshot)
        self.spilled += 1

    def replay(self, timeout_s: float) -> ExportResult:
        result = self.sink.export(self.entries[0], timeout_s)
        if result is not ExportResult.FAILURE:
            self.entries.pop(0)
        return result
