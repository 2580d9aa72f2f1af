"""The ranks' heartbeats the collector holds: the latest beat per run and rank, served on
``/metrics`` as the embedded endpoint serves them.

A heartbeat request (every resource marked by :data:`telemetry.heartbeat.wire.SIGNAL`)
carries a reading rank's view of its run's ranks. It never enters the step path (no run
sinks, no journal, no shared sink's series store): each rank's beat replaces the one held
(an older one, by its send time, is ignored), so a rank's series change phase instead of
piling up. A reader that closes takes its run's beats with it. Beyond ``max_runs`` runs
or ``max_ranks`` ranks per run, beats are dropped and counted (logged at the first drop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from telemetry.heartbeat import FAMILIES, BeatGroup, HeartbeatCollector
from telemetry.heartbeat.beat import Beat
from telemetry.heartbeat.wire import group_of, is_heartbeat
from telemetry.model.snapshot import Snapshot
from telemetry.otlp.decode import Decoder, DecodeResult, Request

__all__ = ["FAMILIES", "HeartbeatBoard"]

logger = logging.getLogger(__name__)

Run = tuple[str, str, str]


class HeartbeatBoard:
    """The latest beat of every rank of every run, as a prometheus_client collector.

    Args:
        max_runs: runs held at most (``limits.max_runs``).
        max_ranks: ranks held per run at most (``limits.max_series_per_metric``).
    """

    def __init__(self, max_runs: int, max_ranks: int) -> None:
        self._max_runs, self._max_ranks = max_runs, max_ranks
        self._lock = threading.Lock()
        self._runs: dict[Run, tuple[float, dict[int, Beat]]] = {}  # run -> (floor, beats)
        self.dropped = 0
        self.collector = HeartbeatCollector(self.groups)

    def consume(self, decoder: Decoder, request: Request) -> DecodeResult | None:
        """Decode a heartbeat request (gauges only: no decoder state) and hold its beats;
        None when ``request`` holds no heartbeat (it goes to the pipeline).

        Raises:
            ValueError: a snapshot is not a whole heartbeat, or the request mixes heartbeat
                and other resources (a heartbeat travels alone); nothing of it is held.
        """
        marks = {is_heartbeat(resource.attributes) for resource in request.resources}
        if True not in marks:
            return None
        if False in marks:
            raise ValueError("heartbeat resources travel in requests of their own")
        with decoder.stage(request) as staged:
            staged.commit()
        self.take(staged.result.snapshots)
        return staged.result

    def take(self, snapshots: Iterable[Snapshot]) -> int:
        """Hold the beats of heartbeat snapshots; returns the beats taken.

        Raises:
            ValueError: a snapshot is not a whole heartbeat (nothing of it is held).
        """
        taken = 0
        for snapshot in snapshots:
            group, closed = group_of(snapshot)
            with self._lock:
                taken += self._take(group, closed)
        return taken

    def _take(self, group: BeatGroup, closed: bool) -> int:
        if closed:
            self._runs.pop(group.run, None)
            return len(group.beats)
        held = self._runs.get(group.run)
        if held is None:
            if len(self._runs) >= self._max_runs:
                return self._drop(len(group.beats), f"run limit {self._max_runs}")
            held = (group.stall_floor_s, {})
        beats = held[1]
        taken = 0
        for beat in group.beats:
            old = beats.get(beat.rank)
            if old is None and len(beats) >= self._max_ranks:
                self._drop(1, f"rank limit {self._max_ranks} of {'/'.join(group.run)}")
                continue
            if old is None or beat.sent >= old.sent:
                beats[beat.rank] = beat
            taken += 1
        self._runs[group.run] = (group.stall_floor_s, beats)
        return taken

    def _drop(self, n: int, why: str) -> int:
        self.dropped += n
        if self.dropped == n:
            logger.warning("heartbeats: %s reached; further beats dropped and counted", why)
        return 0

    def groups(self) -> list[BeatGroup]:
        """A copy of every run's beats, ranks in order."""
        with self._lock:
            return [
                BeatGroup(run, floor, tuple(beats[rank] for rank in sorted(beats)))
                for run, (floor, beats) in self._runs.items()
            ]
