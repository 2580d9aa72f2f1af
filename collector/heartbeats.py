"""The ranks' heartbeats the collector holds: the latest beat per run and rank, served on
``/metrics`` as the embedded endpoint serves them.

A heartbeat resource (marked by :data:`telemetry.heartbeat.wire.SIGNAL`) carries a reader's
view of its ranks: a trainer's rank 0 sends every rank's beat, a rollout or eval worker its
own under its worker id. The pipeline hands it here before anything else
(:meth:`HeartbeatBoard.consume`). It never enters the step path (no run
sinks, no journal, no shared sink's series store): each rank's beat replaces the one held
for its reader and rank (an older one, by its send time, is ignored), so a rank's series
change phase instead of piling up. A reader that closes takes its beats with it (a worker
its own, a trainer's rank 0 its ranks'). Beyond ``max_runs`` runs or ``max_ranks`` beats
per run (workers and ranks together), and snapshots that are not whole heartbeats, are
dropped and counted (logged at the first drop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

from exporters.prometheus.families import Family, describe
from telemetry.heartbeat import BeatGroup, HeartbeatCollector
from telemetry.heartbeat.beat import Beat
from telemetry.heartbeat.wire import group_of, is_heartbeat
from telemetry.model.snapshot import Snapshot
from telemetry.otlp.decode import Decoder, DecodeResult, Request

__all__ = ["HeartbeatBoard"]

logger = logging.getLogger(__name__)

Run = tuple[str, str, str]
DROPPED = Family(
    "rltel_collector_heartbeats_dropped",
    "counter",
    "beats the collector dropped: past limits.max_runs runs or "
    "limits.max_series_per_metric ranks of a run, or not a whole heartbeat",
)


class HeartbeatBoard:
    """The latest beat of every rank of every run, and the beats dropped, as a
    prometheus_client collector (:meth:`collect`, :meth:`describe`).

    Args:
        max_runs: runs held at most (``limits.max_runs``).
        max_ranks: beats held per run at most, its workers' and ranks' together
            (``limits.max_series_per_metric``).
    """

    def __init__(self, max_runs: int, max_ranks: int) -> None:
        self._max_runs, self._max_ranks = max_runs, max_ranks
        self._lock = threading.Lock()
        # run -> reader's worker id ("" for a trainer) -> (floor, rank -> beat)
        self._runs: dict[Run, dict[str, tuple[float, dict[int, Beat]]]] = {}
        self.dropped = 0
        self._served = HeartbeatCollector(self.groups)

    def consume(self, decoder: Decoder, request: Request) -> tuple[Request, DecodeResult | None]:
        """Hold the beats of ``request``'s heartbeat resources (gauges only: no decoder state).

        Returns the request of its other resources (``request`` itself when it holds no
        heartbeat) and the heartbeats' decode result (None without one).
        """
        if not any(is_heartbeat(resource.attributes) for resource in request.resources):
            return request, None
        beats, rest = [], []
        for resource in request.resources:
            (beats if is_heartbeat(resource.attributes) else rest).append(resource)
        with decoder.stage(Request(tuple(beats))) as staged:
            staged.commit()
        self.take(staged.result.snapshots)
        return Request(tuple(rest)), staged.result

    def take(self, snapshots: Iterable[Snapshot]) -> int:
        """Hold the beats of heartbeat snapshots; returns the beats taken. A snapshot that is
        not a whole heartbeat is dropped and counted (in :attr:`dropped`)."""
        taken = 0
        for snapshot in snapshots:
            try:
                group, closed = group_of(snapshot)
            except ValueError as exc:
                self._drop(len(snapshot.points), f"a broken heartbeat ({exc})")
                continue
            with self._lock:
                taken += self._take(group, closed)
        return taken

    def _take(self, group: BeatGroup, closed: bool) -> int:
        readers = self._runs.get(group.run)
        if closed:
            if readers is not None:
                readers.pop(group.worker, None)
                if not readers:
                    del self._runs[group.run]
            return len(group.beats)
        if readers is None:
            if len(self._runs) >= self._max_runs:
                return self._drop(len(group.beats), f"run limit {self._max_runs} reached")
            readers = {}
        beats = readers.get(group.worker, (0.0, {}))[1]
        held = sum(len(ranks) for _, ranks in readers.values()) - len(beats)
        taken = 0
        for beat in group.beats:
            old = beats.get(beat.rank)
            if old is None and held + len(beats) >= self._max_ranks:
                self._drop(1, f"rank limit {self._max_ranks} of {'/'.join(group.run)} reached")
                continue
            if old is None or beat.sent >= old.sent:
                beats[beat.rank] = beat
            taken += 1
        readers[group.worker] = (group.stall_floor_s, beats)
        self._runs[group.run] = readers
        return taken

    def _drop(self, n: int, why: str) -> int:
        self.dropped += n
        if self.dropped == n:
            logger.warning("heartbeats: %s; further drops counted", why)
        return 0

    def describe(self) -> list[Metric]:
        """The families :meth:`collect` builds, without samples."""
        return [*self._served.describe(), *describe([DROPPED])]

    def collect(self) -> Iterator[Metric]:
        """Every rank's latest beat (``rltel_heartbeat_*``) and the beats dropped."""
        yield from self._served.collect()
        yield DROPPED.build(self.dropped)

    def groups(self) -> list[BeatGroup]:
        """A copy of every reader's beats, one group per run and worker, ranks in order."""
        with self._lock:
            return [
                BeatGroup(run, floor, tuple(beats[rank] for rank in sorted(beats)), worker)
                for run, readers in self._runs.items()
                for worker, (floor, beats) in sorted(readers.items())
            ]
