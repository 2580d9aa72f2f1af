"""The OTLP sink's spool as its queue's overflow: requests on disk, replayed in order.

From the first failed request the queue spills the snapshot in hand and everything queued
to :class:`SpoolOverflow`, which appends the requests the sink has not sent yet to its
:class:`~exporters.otlp.spool.Spool`; while failures last, the queue's ``submit`` spills
each new snapshot here on the caller's thread. Once the endpoint is back the queue replays
them, oldest first, before anything queued later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from exporters.base import ExportResult, Overflow
from exporters.otlp.signal_requests import SignalRequest
from exporters.otlp.spool import Part, Spool
from exporters.otlp.transport import OtlpSender
from telemetry.model.snapshot import Snapshot

__all__ = ["PendingRequests", "SpoolOverflow", "close_line", "down_hint", "ranges"]


class PendingRequests(Protocol):
    """What the overflow needs of the OTLP sink: its sender and a snapshot's requests."""

    sender: OtlpSender

    def requests_left(self, snapshot: Snapshot | SignalRequest) -> list[Part]:
        """The requests of ``snapshot`` not sent yet."""

    def forget(self, snapshot: Snapshot | SignalRequest) -> None:
        """Drop the requests kept for ``snapshot``."""


class SpoolOverflow(Overflow):
    """The OTLP sink's spool as its queue's overflow: requests on disk, replayed in order."""

    def __init__(self, sink: PendingRequests, spool: Spool) -> None:
        self.sink = sink
        self.spool = spool

    def __len__(self) -> int:
        return len(self.spool)

    def spill(self, snapshot: Snapshot | SignalRequest) -> None:
        """Append the requests of ``snapshot`` not sent yet; beyond the limit they are counted."""
        for part in self.sink.requests_left(snapshot):
            self.spool.append(part)
        self.sink.forget(snapshot)

    def replay(self, timeout_s: float) -> ExportResult:
        """Send the oldest spooled request; it leaves the spool unless the answer is FAILURE."""
        del timeout_s  # one request: the sender's own deadline bounds it
        batch = self.spool.peek()
        if batch is None:
            return ExportResult.SUCCESS
        result = self.sink.sender.send(batch)
        if result is not ExportResult.FAILURE:
            self.spool.pop()
        return result


def down_hint(endpoint: str, spool: Spool | None) -> str:
    """What the first failed request of an outage logs: where the data goes meanwhile, and
    the command that sends a spool left behind by a process that ended before the endpoint
    came back."""
    if spool is None:
        return "retrying; without a spool an outage longer than the queue loses data"
    where = spool.directory
    return (
        f"spooling to {where} and retrying; if this process ends before it is back, "
        f"send the spool with: rltel spool flush {where} --endpoint {endpoint}"
    )


def close_line(
    health: dict[str, float], spool: Spool | None, spool_root: Path, endpoint: str
) -> str | None:
    """The close's one line when something was not delivered, else None: what is left on
    disk unacknowledged (requests, points, the steps they hold), what was dropped and what
    the endpoint refused for good, and the command that sends the spool."""
    dropped, refused = int(health["points_dropped"]), int(health["points_failed"])
    left = 0 if spool is None else len(spool)
    if not (left or dropped or refused):
        return None
    parts = []
    if left and spool is not None:
        steps = spool.steps()
        held = f"; steps {ranges(steps)}" if steps else ""
        parts.append(
            f"{left} requests ({int(health['spool_points'])} points{held}) not acknowledged, "
            f"kept in {spool.directory} for the next run"
        )
    parts.append(f"{dropped} points dropped (points_dropped)")
    parts.append(f"{refused} points refused by the endpoint (points_failed)")
    command = f"; to send the spool now: rltel spool flush {spool_root} --endpoint {endpoint}"
    return f"otlp: closed with {', '.join(parts)}{command if left else ''}"


def ranges(steps: list[int]) -> str:
    """``1-3, 7`` for steps 1, 2, 3, 7 (sorted, each once)."""
    runs: list[list[int]] = []
    for step in sorted(set(steps)):
        if runs and step == runs[-1][1] + 1:
            runs[-1][1] = step
        else:
            runs.append([step, step])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
