"""Decode -> route -> sinks: the collector's pipeline between the gRPC handler and the sinks.

Routing of each decoded Snapshot:

- every snapshot goes, as it arrives, to the shared sinks (Prometheus, remote write): one
  endpoint for every run, series told apart by their resource labels;
- a snapshot whose resource names a run (``rltel.experiment``) also feeds that run's
  step-based sinks (:mod:`collector.runs`: rank 0's training snapshots, and the rollout/eval
  windows merged into the next training step).

Heartbeat resources (a reading rank's beats of its run's ranks) go to neither: the
pipeline's :class:`~collector.heartbeats.HeartbeatBoard` holds the latest beat per rank and
the shared Prometheus sink serves them (``rltel_heartbeat_*``).

Each sink has its own bounded queue (:class:`exporters.fanout.FanOut`); a slow sink never
delays the others or the gRPC response. Accepted means kept (:mod:`collector.admission`):
a request is decoded with its temporality changes staged, then admitted only if every
healthy sink's queue has room for its snapshots and the memory budget for their decoded
size; only then is the state committed and the snapshots queued. Otherwise
:class:`~collector.refusals.Refused` (``RESOURCE_EXHAUSTED``, retryable) is raised and
nothing of the request is kept. Accepted means durable (:meth:`Pipeline.recover`,
:mod:`collector.durable`): the snapshots are in every sink's journal before the request is
answered, and a new process replays them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpc import StatusCode

from collector.admission import MemoryBudget, decoded_bytes
from collector.config import LimitsConfig
from collector.durable import DurableState
from collector.heartbeats import HeartbeatBoard
from collector.refusals import REFUSALS, Refused
from collector.runs import Runs
from collector.sinks import RunSinks
from exporters.base import Sink
from exporters.fanout import FanOut, MemoryCharge, Reservation, SinkStats
from exporters.prometheus import PrometheusSink
from telemetry.model.run import run_name
from telemetry.model.snapshot import Snapshot, Step
from telemetry.otlp.decode import Decoder, DecodeResult, Request

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """The pipeline's counters for the self-metrics."""

    points_accepted: int
    points_rejected: int
    snapshots: int
    refused_overloaded: int  # memory budget
    runs: int
    runs_refused: int
    pending_bytes: int
    decoder_series: int
    sinks: dict[tuple[str, str], SinkStats]  # (run or "shared", sink name) -> stats
    refused: dict[str, int]  # requests refused by reason (REFUSALS)
    over_limit: dict[str, int]  # points rejected by label limit (LabelLimits field)


class Pipeline:
    """Turns OTLP requests into sink exports.

    Args:
        shared_sinks: sinks that see every snapshot as it arrives (Prometheus).
        run_sinks: ``(experiment, trial) -> sinks`` for one run's step-based sinks; called
            once per run, on first sight. None: no per-run sinks.
        limits: the ``limits`` section: queue sizes, memory, runs and sink timeout, the
            per-request bounds (admission) and the name and label bounds (the decoder's).
        decoder: the request decoder (default: one with ``limits``' series and label bounds).
    """

    def __init__(
        self,
        shared_sinks: Sequence[Sink],
        run_sinks: RunSinks | None = None,
        limits: LimitsConfig | None = None,
        decoder: Decoder | None = None,
    ) -> None:
        self.limits = limits or LimitsConfig()
        self.decoder = decoder or Decoder(
            self.limits.max_series_per_metric, label_limits=self.limits
        )
        self.budget = MemoryBudget(self.limits.memory_limit_bytes)
        queue = dict(queue_size=self.limits.queue_size, timeout_s=self.limits.sink_timeout_s)
        self.shared = FanOut(shared_sinks, **queue)
        self.runs = Runs(run_sinks, self.limits.max_runs, **queue)
        self.heartbeats = HeartbeatBoard(self.limits.max_runs, self.limits.max_series_per_metric)
        for sink in shared_sinks:  # the beats' one way out: the /metrics of the shared sink
            if isinstance(sink, PrometheusSink):
                sink.register(self.heartbeats)
        self._lock = threading.Lock()
        self._closed = False
        self._accepted = self._rejected = self._snapshots = 0
        self._refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)
        self._over_limit: dict[str, int] = {}
        self.durable: DurableState | None = None
        self._sync_failing = 0  # requests refused in a row because a journal write failed

    def recover(self, durable: DurableState) -> None:
        """Journal every sink from now on in ``durable``, and queue again, before any
        request, what an earlier process accepted and its sinks did not hold: the shared
        sinks' journals, then each stored run's (its sinks started now; a run whose sinks
        cannot start keeps its journal until a request for it opens it)."""
        self.durable = durable
        durable.attach_shared(self.shared)
        self.runs.durable = durable
        for key in durable.stored_runs():
            try:
                self.runs.open(key)
            except Refused as exc:  # UNAVAILABLE: the run's sinks cannot start now
                logger.error("durable queue: run %s_%s not replayed yet: %s", *key, exc)

    def consume(
        self,
        request: Request,
        expired: Callable[[], bool] | None = None,
        hold: MemoryCharge | None = None,
    ) -> DecodeResult:
        """Decode ``request``, admit it, and queue its snapshots for every sink.

        Args:
            request: an ``ExportMetricsServiceRequest`` as the decoder read it
                (:meth:`~telemetry.otlp.decode.Decoder.read`).
            expired: ``() -> True`` once the sender's deadline has passed; checked before
                decoding and again before anything is kept.
            hold: the budget held while the request is parsed; the decoded snapshots'
                charge takes it over when the request is admitted.

        Raises:
            Refused: nothing was kept; its code says why: ``UNAVAILABLE`` the pipeline is
                shutting down, or (retryable) the request's run cannot take data now;
                ``INVALID_ARGUMENT`` over ``max_points_per_request`` or
                ``max_decoded_bytes``; ``DEADLINE_EXCEEDED`` the sender's deadline passed;
                ``RESOURCE_EXHAUSTED`` (retryable) a healthy sink's queue or the memory
                budget cannot take it now.
        """
        if self._closed:
            raise Refused(StatusCode.UNAVAILABLE, "the collector is shutting down")
        bounds = self.limits
        points = request.points
        if points > bounds.max_points_per_request:
            self.count_refusal("too_large")
            raise Refused(
                StatusCode.INVALID_ARGUMENT,
                f"request has {points} data points; max_points_per_request is "
                f"{bounds.max_points_per_request}: split it",
            )
        request, beats = self.heartbeats.consume(self.decoder, request)
        if beats is not None and not request.resources:
            return beats  # heartbeats only: held for /metrics, never in the step path
        try:
            self.runs.open_named(request)  # a run's sinks start outside the decoder's lock
        except Refused:  # UNAVAILABLE, retryable: the run cannot take data now
            self.count_refusal("sinks_down")
            raise
        if expired is not None and expired():
            self.count_refusal("expired")
            raise Refused(StatusCode.DEADLINE_EXCEEDED, "deadline passed before decoding")
        with self.decoder.stage(request) as staged:
            result = staged.result
            nbytes = decoded_bytes(result.snapshots)
            if nbytes > bounds.max_decoded_bytes:
                self.count_refusal("too_large")
                raise Refused(
                    StatusCode.INVALID_ARGUMENT,
                    f"request decodes to ~{nbytes} bytes; max_decoded_bytes is "
                    f"{bounds.max_decoded_bytes}: split it",
                )
            if expired is not None and expired():
                self.count_refusal("expired")
                raise Refused(
                    StatusCode.DEADLINE_EXCEEDED, "deadline passed while decoding; nothing was kept"
                )
            reservations = self._reserve(result.snapshots)
            if not self.budget.acquire(nbytes, replacing=hold):
                for reservation in reservations.values():
                    reservation.release()
                self.count_refusal("memory")
                raise Refused(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"memory budget: {self.budget.held} of {self.budget.limit} bytes held, "
                    f"request needs ~{nbytes}: retry later",
                    retry=True,
                )
            staged.commit()
            charge = MemoryCharge(nbytes, self.budget.release)
            try:
                for snapshot in result.snapshots:
                    self._route(snapshot, charge, reservations)
            finally:
                for reservation in reservations.values():
                    reservation.release()
                charge.done()
        self._sync_journals()
        with self._lock:
            for limit, n in result.over_limit:
                self._over_limit[limit] = self._over_limit.get(limit, 0) + n
            self._accepted += result.accepted
            self._rejected += result.rejected
            self._snapshots += len(result.snapshots)
        return result

    def deliver(
        self, snapshot: Snapshot, figures_at: Callable[[Step | None], Snapshot | None]
    ) -> bool:
        """Queue one scrape (or trace durations) for the shared sinks and the run's sinks;
        False when the memory budget or a queue could not take it all.

        ``snapshot`` goes to the shared sinks (Prometheus, remote write); ``figures_at(step)``,
        built under the run's lock at the run's latest training step (None before the first),
        goes to the run's W&B, SwanLab, TensorBoard and console sinks. It is charged and
        queued as an admitted request's snapshots are, but nothing is reserved: a full sink
        queue drops it and counts it there (a scrape is not a sender's data that a retry would
        keep). The scrape receiver (``collector/scrape/``) and the trace merge
        (``collector/traces/``) take this bound method as a plain callable, so neither folder
        imports the pipeline.
        """
        nbytes = decoded_bytes((snapshot,))
        if not self.budget.acquire(nbytes):
            return False
        charge = MemoryCharge(nbytes, self.budget.release)
        try:
            kept = self.shared.export(snapshot, charge) if snapshot.points else True
            run = self.runs.of(snapshot)
            if run is None:
                return kept
            with run.lock:
                figures = figures_at(run.merger.step)
                if figures is not None:
                    kept = run.fanout.export(figures, charge) and kept
            return kept
        finally:
            charge.done()

    def _sync_journals(self) -> None:
        """Make the request's journal entries durable before it is answered, or refuse it.

        Raises:
            Refused: ``RESOURCE_EXHAUSTED`` (retryable), a journal could not be written
                ("durable"; what was queued is delivered anyway, so the sender's retry may
                arrive twice: sinks that hold steps skip it).
        """
        if self.durable is None:
            return
        try:
            self.durable.sync()
        except OSError as exc:
            self.count_refusal("durable")
            with self._lock:
                self._sync_failing += 1
                first = self._sync_failing == 1
            if first:
                logger.error("durable queue: cannot write (%s); refusing requests", exc)
            raise Refused(
                StatusCode.RESOURCE_EXHAUSTED,
                f"durable queue cannot write: {exc}: retry later",
                retry=True,
            ) from None
        with self._lock:
            failed, self._sync_failing = self._sync_failing, 0
        if failed:
            logger.warning("durable queue: writing again after %d refused requests", failed)

    def count_refusal(self, reason: str) -> None:
        """Count one refused request; ``reason`` is one of :data:`REFUSALS`."""
        with self._lock:
            self._refused[reason] += 1

    def _reserve(self, snapshots: Sequence[Snapshot]) -> dict[int, Reservation]:
        """Queue slots for every snapshot in every healthy sink, or :class:`Refused`."""
        needed: dict[int, tuple[FanOut, int]] = {}
        for snapshot in snapshots:
            fanout, n = needed.get(id(self.shared), (self.shared, 0))
            needed[id(self.shared)] = (fanout, n + (1 if snapshot.points else 0))
            run = self.runs.get(snapshot)
            own = run.slots_for(snapshot) if run is not None else 0
            if own:
                fanout, n = needed.get(id(run.fanout), (run.fanout, 0))
                needed[id(run.fanout)] = (fanout, n + own)
        reservations: dict[int, Reservation] = {}
        for key, (fanout, n) in needed.items():
            reservation = fanout.reserve(n) if n else Reservation({})
            if reservation is None:
                for held in reservations.values():
                    held.release()
                self.count_refusal("queue_full")
                full = [q.name for q in fanout.queued if q.stats().queue_depth >= q.queue_size]
                raise Refused(
                    StatusCode.RESOURCE_EXHAUSTED,
                    f"sink queue full ({', '.join(full) or 'reserved'}; queue_size "
                    f"{self.limits.queue_size}): retry later",
                    retry=True,
                )
            reservations[key] = reservation
        return reservations

    def _route(
        self, snapshot: Snapshot, charge: MemoryCharge, reservations: dict[int, Reservation]
    ) -> None:
        if snapshot.points:
            self.shared.export(snapshot, charge, reservations.get(id(self.shared)))
        run = self.runs.of(snapshot)
        if run is not None:
            run.route(snapshot, charge, reservations.get(id(run.fanout)))

    def pending_bytes(self) -> int:
        """Bytes the memory budget holds now: requests in flight and snapshots in queues."""
        return self.budget.held

    def stats(self) -> PipelineStats:
        """A copy of every counter and every sink's queue stats."""
        sinks = {("shared", name): s for name, s in self.shared.stats().items()}
        for (experiment, trial), run in self.runs.items():
            for name, s in run.fanout.stats().items():
                sinks[(run_name(experiment, trial), name)] = s
        with self._lock:
            return PipelineStats(
                self._accepted,
                self._rejected,
                self._snapshots,
                self._refused["memory"],
                len(self.runs),
                self.runs.refused,
                self.budget.held,
                self.decoder.series,
                sinks,
                dict(self._refused),
                dict(self._over_limit),
            )

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every snapshot queued so far reached its sinks; True when all did."""
        deadline = time.monotonic() + timeout_s
        fanouts = [self.shared, *(run.fanout for _, run in self.runs.items())]
        return all(
            [fanout.force_flush(max(0.0, deadline - time.monotonic())) for fanout in fanouts]
        )

    def shutdown(self, timeout_s: float) -> None:
        """Refuse new requests, release pending rollout windows, drain every queue, close.

        All queues drain concurrently within one deadline; then each sink is shut down
        (W&B/SwanLab runs finished). Safe to call twice.
        """
        self._closed = True
        deadline = time.monotonic() + timeout_s
        runs = [run for _, run in self.runs.items()]
        for run in runs:
            run.flush()
        fanouts = [self.shared, *(run.fanout for run in runs)]
        for fanout in fanouts:
            for queued in fanout.queued:
                queued.close(timeout_s)
        for fanout in fanouts:
            fanout.shutdown(max(0.0, deadline - time.monotonic()))
        if self.durable is not None:
            self.durable.close()
