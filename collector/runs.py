"""The collector's runs: each experiment/trial's step-based sinks and rollout merger.

A snapshot whose resource names a run (``rltel.experiment``) feeds that run's step-based
sinks (W&B, SwanLab, TensorBoard, console), built on first sight of the run: rollout/eval
windows go through the run's :class:`~collector.merge.RolloutMerger` and reach those sinks
merged, with the next training step; training snapshots of rank 0 (or without a rank) go
straight to them, other ranks' copies of the DP-reduced values nowhere here (AReaL logs from
rank 0 only). A run's rollout samples (:mod:`collector.samples`, from the logs service) are
released at their training step: a step's before the next training snapshot is queued.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpc import StatusCode

from collector.merge import RolloutMerger
from collector.refusals import Refused
from collector.sinks import RunSinks
from exporters.fanout import FanOut, Reservation
from exporters.memory_charge import MemoryCharge
from telemetry.model import names
from telemetry.model.run import RunKey
from telemetry.model.snapshot import Attributes, Snapshot
from telemetry.otlp.decode import Request

if TYPE_CHECKING:
    from collector.durable import DurableState
    from collector.run_samples import RunSamples

logger = logging.getLogger(__name__)

REOPEN_AFTER_S = 1.0
"""A run whose sinks failed to start is tried again at most this often (refused meanwhile)."""
STREAMS_MERGED = ("rollout", "eval")


def _merged(resource: Attributes) -> bool:
    """A resource whose windows go through the merger (as the decoder names its stream)."""
    found = dict(reversed(resource))
    return (found.get(names.STREAM) or found.get(names.ROLE)) in STREAMS_MERGED


def _is_rank0(snapshot: Snapshot) -> bool:
    return str(snapshot.resource_value(names.RANK, 0)) == "0"


@dataclass(slots=True)
class Run:
    """One run's sinks behind their queues, its rollout merger, and the lock ordering both."""

    fanout: FanOut
    merger: RolloutMerger
    lock: threading.Lock
    samples: RunSamples | None = None  # made by the samples consumer on the run's first one
    trainer_closed: bool = False  # rank 0's latest snapshot carried the closed marker

    def slots_for(self, snapshot: Snapshot) -> int:
        """Snapshots that ``snapshot`` may put in this run's queues (itself, merged windows)."""
        if snapshot.stream in STREAMS_MERGED or not _is_rank0(snapshot):
            return 0
        released = len(STREAMS_MERGED) if snapshot.step is not None else 0
        return (1 if snapshot.points else 0) + released

    def route(
        self, snapshot: Snapshot, charge: MemoryCharge, reservation: Reservation | None = None
    ) -> None:
        """Merge a rollout/eval window, or queue rank 0's training snapshot and what it releases."""
        with self.lock:
            if snapshot.stream in STREAMS_MERGED:
                self.merger.add(snapshot)
                return
            if not _is_rank0(snapshot):
                return
            self.trainer_closed = any(p.metric == names.CLOSED_METRIC for p in snapshot.points)
            if self.samples is not None and snapshot.step is not None:
                for released in self.samples.on_train(snapshot.step):  # earlier steps' first
                    self.fanout.export(released)
            if snapshot.points:
                self.fanout.export(snapshot, charge, reservation)
            for merged in self.merger.on_train(snapshot):
                self.fanout.export(merged, charge, reservation)
            self.merger.checkpoint()  # the released windows are in the sinks' journals now

    def flush(self) -> None:
        """At shutdown: queue the samples still pending, and the rollout/eval windows too
        unless they are journaled and the trainer is still running.

        A journaled window waits for its training step across the restart (the next
        collector merges it again from the journal); one flushed now would be logged at the
        last step seen, not its own. Without the journal, or once the trainer has closed,
        the windows go at the last step seen.
        """
        with self.lock:
            keep = (
                self.merger.journal is not None and not self.trainer_closed and self.merger.waiting
            )
            if not keep:
                for merged in self.merger.flush():
                    self.fanout.export(merged)
            for released in self.samples.flush() if self.samples is not None else ():
                self.fanout.export(released)
            if not keep:
                self.merger.checkpoint(final=True)


class Runs:
    """The runs seen so far, at most ``max_runs``, each opened once with its own sinks.

    Args:
        run_sinks: ``(experiment, trial) -> sinks``, called once per run; None: no runs.
        max_runs: runs beyond this many are refused (counted in :attr:`refused`).
        queue_size: per-sink queue bound of each run's fan-out.
        timeout_s: per-export timeout of each run's sinks.
    """

    def __init__(
        self, run_sinks: RunSinks | None, max_runs: int, queue_size: int, timeout_s: float
    ) -> None:
        self._run_sinks = run_sinks
        self._max_runs = max_runs
        self._queue = dict(queue_size=queue_size, timeout_s=timeout_s)
        self._runs: dict[RunKey, Run] = {}
        self._lock = threading.Lock()
        self._down: dict[RunKey, tuple[float, str, int]] = {}  # when, why, refusals
        self.refused = 0
        self.durable: DurableState | None = None

    def key(self, resource: Attributes) -> RunKey | None:
        """The run ``resource`` names; None without an experiment or without runs."""
        if self._run_sinks is None:
            return None
        found = dict(reversed(resource))  # a repeated name's first value
        experiment = found.get(names.EXPERIMENT)
        if experiment is None:
            return None
        return str(experiment), str(found.get(names.TRIAL, "default"))

    def open_named(self, request: Request) -> None:
        """Open the run of every resource of ``request`` that names one.

        Raises:
            Refused: ``UNAVAILABLE``, retryable: as :meth:`open`; or a rollout/eval window
                for a run whose merge journal is full (retry once a training step released
                the windows).
        """
        for resource in request.resources:
            key = self.key(resource.attributes)
            run = self.open(key) if key is not None else None
            if run is not None and run.merger.full and _merged(resource.attributes):
                why = f"run {key[0]}_{key[1]}: rollout merge journal full"
                raise Refused(StatusCode.UNAVAILABLE, why, retry=True)

    def get(self, snapshot: Snapshot) -> Run | None:
        """The run of ``snapshot`` if it is open already."""
        key = self.key(snapshot.resource)
        return None if key is None else self._runs.get(key)

    def of(self, snapshot: Snapshot) -> Run | None:
        """The run of ``snapshot``, opened if new; None without one or past ``max_runs``."""
        key = self.key(snapshot.resource)
        return None if key is None else self.open(key)

    def open(self, key: RunKey) -> Run | None:
        """The run ``key``, its sinks started on first sight; None past ``max_runs``.

        Raises:
            Refused: ``UNAVAILABLE``, retryable: a sink of the run failed to start (tried
                again at most every :data:`REOPEN_AFTER_S`), or its durable queue cannot be
                opened; the failure is logged once until it changes.
        """
        run = self._runs.get(key)
        if run is not None:
            return run
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                return run
            if len(self._runs) >= self._max_runs:
                self.refused += 1
                if self.refused == 1:
                    logger.warning("run limit %d reached: %s_%s", self._max_runs, *key)
                return None
            down = self._down.get(key)
            if down is not None and time.monotonic() - down[0] < REOPEN_AFTER_S:
                self._down[key] = (down[0], down[1], down[2] + 1)
                raise Refused(StatusCode.UNAVAILABLE, down[1], retry=True)
            try:
                sinks = list(self._run_sinks(*key))
            except Refused as exc:  # a sink failed on a file-system error: retry later
                self._sinks_down(key, str(exc))
                raise exc from None
            except Exception as exc:  # a sink that cannot start must not stop the collector
                logger.error("run %s_%s: sinks failed to start: %s", *key, exc)
                sinks = []
            if down is not None:
                logger.warning("run %s_%s: sinks started after %d refusals", *key, down[2] + 1)
                del self._down[key]
            run = Run(FanOut(sinks, **self._queue), RolloutMerger(), threading.Lock())
            if self.durable is not None:
                try:
                    self.durable.attach_run(key, run.fanout, run.merger)
                except OSError as exc:  # no journal, no run: the sender keeps the data
                    run.fanout.shutdown(1.0)
                    why = f"durable queue: {exc}"
                    self._sinks_down(key, why)
                    raise Refused(StatusCode.UNAVAILABLE, why, retry=True) from None
            self._runs[key] = run
            return run

    def _sinks_down(self, key: RunKey, why: str) -> None:
        """Remember that ``key``'s sinks failed; log when the failure is new or changed."""
        down = self._down.get(key)
        if down is None or down[1] != why:
            logger.error("run %s_%s: refused until its sinks start: %s", *key, why)
        self._down[key] = (time.monotonic(), why, (down[2] + 1) if down else 1)

    def items(self) -> list[tuple[RunKey, Run]]:
        """A copy of the open runs, safe while new ones open."""
        return list(self._runs.items())

    def __len__(self) -> int:
        return len(self._runs)
