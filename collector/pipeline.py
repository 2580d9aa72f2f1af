"""Decode -> route -> sinks: the collector's pipeline between the gRPC handler and the sinks.

Routing of each decoded Snapshot:

- every snapshot goes, as it arrives, to the shared sinks (Prometheus): one endpoint for
  every run, series told apart by their resource labels;
- a snapshot whose resource names a run (``rltel.experiment``) also feeds that run's
  step-based sinks (W&B, SwanLab, TensorBoard, console), built on first sight of the run:
  rollout/eval windows go through the run's :class:`~collector.merge.RolloutMerger` and
  reach those sinks merged, with the next training step; training snapshots of rank 0 (or
  without a rank) go straight to them, other ranks' copies of the DP-reduced values only
  to Prometheus (AReaL logs from rank 0 only).

Each sink has its own bounded queue (:class:`exporters.fanout.FanOut`): a slow sink drops
and counts, never delays the others or the gRPC response. Admission control: past
``memory_limit_bytes`` of queued request bytes the pipeline raises :class:`Overloaded`
and the server answers RESOURCE_EXHAUSTED, so senders retry and spool.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from collector.config import LimitsConfig, SinksConfig
from collector.decode import Decoder, DecodeResult
from collector.merge import RolloutMerger
from exporters.base import Sink
from exporters.fanout import FanOut, SinkStats
from exporters.prometheus import PrometheusSink
from telemetry.snapshot import Snapshot

logger = logging.getLogger(__name__)

RunSinks = Callable[[str, str], Sequence[Sink]]
STREAMS_MERGED = ("rollout", "eval")
_CHECK_INTERVAL_S = 0.01


class Overloaded(Exception):
    """The memory limit is reached: the sender should retry later (retryable)."""


class Closed(Exception):
    """The pipeline is shutting down and accepts nothing more (retryable elsewhere)."""


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """The pipeline's counters for the self-metrics."""

    points_accepted: int
    points_rejected: int
    snapshots: int
    refused_overloaded: int
    runs: int
    runs_refused: int
    pending_bytes: int
    decoder_series: int
    sinks: dict[tuple[str, str], SinkStats]  # (run or "shared", sink name) -> stats


@dataclass(slots=True)
class _Run:
    fanout: FanOut
    merger: RolloutMerger
    lock: threading.Lock


class Pipeline:
    """Turns OTLP requests into sink exports.

    Args:
        shared_sinks: sinks that see every snapshot as it arrives (Prometheus).
        run_sinks: ``(experiment, trial) -> sinks`` for one run's step-based sinks; called
            once per run, on first sight. None: no per-run sinks.
        limits: queue sizes, memory limit, run limit, sink timeout.
        decoder: the request decoder (default: one with ``limits``' series bounds).
    """

    def __init__(
        self,
        shared_sinks: Sequence[Sink],
        run_sinks: RunSinks | None = None,
        limits: LimitsConfig | None = None,
        decoder: Decoder | None = None,
    ) -> None:
        self.limits = limits or LimitsConfig()
        self.decoder = decoder or Decoder(self.limits.max_series_per_metric)
        self._queue = dict(queue_size=self.limits.queue_size, timeout_s=self.limits.sink_timeout_s)
        self.shared = FanOut(shared_sinks, **self._queue)
        self._run_sinks = run_sinks
        self._runs: dict[tuple[str, str], _Run] = {}
        self._runs_lock = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        self._accepted = self._rejected = self._snapshots = 0
        self._refused = self._runs_refused = 0
        self._bytes_per_snapshot = 0.0
        self._pending = 0
        self._checked = 0.0

    def consume(self, request, size_bytes: int) -> DecodeResult:
        """Decode ``request`` (``size_bytes`` on the wire) and hand its snapshots to the sinks.

        Raises:
            Closed: the pipeline is shutting down.
            Overloaded: queued data would pass the memory limit; retry later.
        """
        if self._closed:
            raise Closed("the collector is shutting down")
        if self.pending_bytes() + size_bytes > self.limits.memory_limit_bytes:
            with self._lock:
                self._refused += 1
            raise Overloaded(
                f"collector queues hold ~{self._pending} bytes; limit "
                f"{self.limits.memory_limit_bytes}: retry later"
            )
        result = self.decoder.decode(request)
        if result.snapshots:
            share = size_bytes / len(result.snapshots)
            with self._lock:
                self._bytes_per_snapshot += 0.1 * (share - self._bytes_per_snapshot)
        for snapshot in result.snapshots:
            self._route(snapshot)
        with self._lock:
            self._accepted += result.accepted
            self._rejected += result.rejected
            self._snapshots += len(result.snapshots)
        return result

    def _route(self, snapshot: Snapshot) -> None:
        if snapshot.points:
            self.shared.export(snapshot)
        experiment = snapshot.resource_value("rltel.experiment")
        if experiment is None or self._run_sinks is None:
            return
        run = self._run(str(experiment), str(snapshot.resource_value("rltel.trial", "default")))
        if run is None:
            return
        with run.lock:
            if snapshot.stream in STREAMS_MERGED:
                run.merger.add(snapshot)
                return
            if str(snapshot.resource_value("rltel.rank", 0)) != "0":
                return
            if snapshot.points:
                run.fanout.export(snapshot)
            for merged in run.merger.on_train(snapshot):
                run.fanout.export(merged)

    def _run(self, experiment: str, trial: str) -> _Run | None:
        key = (experiment, trial)
        run = self._runs.get(key)
        if run is not None:
            return run
        with self._runs_lock:
            run = self._runs.get(key)
            if run is not None:
                return run
            if len(self._runs) >= self.limits.max_runs:
                self._runs_refused += 1
                if self._runs_refused == 1:
                    logger.warning("run limit %d reached: %s_%s", self.limits.max_runs, *key)
                return None
            try:
                sinks = list(self._run_sinks(experiment, trial))
            except Exception as exc:  # a sink that cannot start must not stop the collector
                logger.error("run %s_%s: sinks failed to start: %s", experiment, trial, exc)
                sinks = []
            run = _Run(FanOut(sinks, **self._queue), RolloutMerger(), threading.Lock())
            self._runs[key] = run
            return run

    def pending_bytes(self) -> int:
        """Estimated bytes of snapshots waiting in sink queues (refreshed every 10 ms)."""
        now = time.monotonic()
        if now - self._checked >= _CHECK_INTERVAL_S:
            fanouts = [self.shared, *(run.fanout for run in list(self._runs.values()))]
            depth = sum(
                max((q.stats().queue_depth for q in fanout.queued), default=0) for fanout in fanouts
            )
            self._pending = int(depth * self._bytes_per_snapshot)
            self._checked = now
        return self._pending

    def stats(self) -> PipelineStats:
        """A copy of every counter and every sink's queue stats."""
        sinks = {("shared", name): s for name, s in self.shared.stats().items()}
        for (experiment, trial), run in list(self._runs.items()):
            for name, s in run.fanout.stats().items():
                sinks[(f"{experiment}_{trial}", name)] = s
        with self._lock:
            return PipelineStats(
                self._accepted,
                self._rejected,
                self._snapshots,
                self._refused,
                len(self._runs),
                self._runs_refused,
                self._pending,
                self.decoder.series,
                sinks,
            )

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every snapshot queued so far reached its sinks; True when all did."""
        deadline = time.monotonic() + timeout_s
        fanouts = [self.shared, *(run.fanout for run in list(self._runs.values()))]
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
        runs = list(self._runs.values())
        for run in runs:
            with run.lock:
                for merged in run.merger.flush():
                    run.fanout.export(merged)
        fanouts = [self.shared, *(run.fanout for run in runs)]
        for fanout in fanouts:
            for queued in fanout.queued:
                queued.close(timeout_s)
        for fanout in fanouts:
            fanout.shutdown(max(0.0, deadline - time.monotonic()))


def run_sink_factory(sinks: SinksConfig) -> RunSinks:
    """``(experiment, trial) -> step-based sinks`` from the collector's ``sinks`` section.

    Local directories get ``<experiment>/<trial>`` appended (TensorBoard ``path``, SwanLab
    ``logdir``), so runs never share files; W&B files go under ``fileroot`` as in the logger.
    """
    from exporters.factory import build_sinks

    def build(experiment: str, trial: str) -> list[Sink]:
        config = sinks.logger_config(experiment, trial)
        tensorboard, swanlab = config.tensorboard, config.swanlab
        if tensorboard.path is not None:
            path = str(Path(tensorboard.path) / experiment / trial)
            tensorboard = dataclasses.replace(tensorboard, path=path)
        if swanlab.logdir is not None:
            logdir = str(Path(swanlab.logdir) / experiment / trial)
            swanlab = dataclasses.replace(swanlab, logdir=logdir)
        prometheus = dataclasses.replace(config.prometheus, enabled=False)
        config = dataclasses.replace(
            config, tensorboard=tensorboard, swanlab=swanlab, prometheus=prometheus
        )
        return build_sinks(config, swanlab_process=True)

    return build


def shared_sinks(sinks: SinksConfig) -> list[PrometheusSink]:
    """The sinks every snapshot reaches as it arrives: Prometheus when enabled.

    Raises:
        OSError: the Prometheus address cannot be bound.
    """
    if not sinks.prometheus.enabled:
        return []
    return [PrometheusSink(sinks.prometheus)]
