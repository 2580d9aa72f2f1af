"""The collector's samples consumer: OTLP log records into each run's snapshots, at their step.

:class:`SamplesConsumer` is the logs service's consumer (a ``SignalConsumer``): it decodes the
samples of a request (:func:`telemetry.otlp.samples.decode_samples`) and hands each to its
run's :class:`~collector.run_samples.RunSamples`, which releases each training step's
samples to the run's step-based sinks (W&B, TensorBoard, SwanLab, ``samples.jsonl``) as one
snapshot at the step's ``global_step``, bounded as embedded:

- a trainer's samples carry their step; the trainer's logs request of a step comes after
  its metrics (the OTLP sink sends them in that order) and closes the step: its window is
  released then;
- rollout and eval workers' samples wait, like their metric windows
  (:mod:`collector.merge`), for the next training step and belong to it; a step the
  trainer logged no samples for is released before the next training snapshot is queued
  (:meth:`collector.runs.Run.route`).

A retried logs request (a sender's same resource, snapshot time and step) is skipped and
counted. What waits for its step is in memory only: :meth:`SamplesConsumer.flush` is True only when
nothing waits, so the logs journal (``durable``) replays a request whose samples were not
released yet after a crash; a stopping server releases them first
(:meth:`SamplesConsumer.release`). A replay may hand on samples released already: the
samples sinks skip a (step, stream) they hold, and replayed workers' samples take the
trainer step that follows them in the journal (:meth:`RunSamples.add`), so each step's
samples are written once.
"""

from __future__ import annotations

import logging
import threading

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from collector.run_samples import WAITING_STREAMS, RunSamples
from collector.runs import Run, Runs
from collector.signal_journal import replaying
from telemetry.config import SamplesConfig
from telemetry.model import names
from telemetry.model.run import RunKey
from telemetry.model.snapshot import Snapshot
from telemetry.otlp.samples import ReceivedSample, decode_samples

logger = logging.getLogger(__name__)


class SamplesConsumer:
    """The logs service's consumer: each sample to its run, released steps to its sinks.

    Args:
        runs: the pipeline's runs (a sample's resource names its run, as a snapshot's).
        config: the collector's ``samples`` section (the bounds).
        seed: seeds the reservoirs (tests).
    """

    def __init__(self, runs: Runs, config: SamplesConfig, seed: int | None = None) -> None:
        self._runs = runs
        self._config = config
        self._seed = seed
        self._lock = threading.Lock()
        self.received = self.dropped = 0
        self._unrouted = 0  # samples of no run in a row (logged once per run of them)

    def consume(self, request: ExportLogsServiceRequest) -> None:
        """Hand every sample of ``request`` to its run; queue the steps it releases."""
        if not self._config.enabled:
            return
        by_run: dict[RunKey, list[ReceivedSample]] = {}
        unrouted = 0
        for received in decode_samples(request):
            key = self._runs.key(received.resource)
            if key is None:
                unrouted += 1
            else:
                by_run.setdefault(key, []).append(received)
        for key, items in by_run.items():
            run = self._runs.open(key)  # Refused: the logs service counts and logs it
            if run is None:
                unrouted += len(items)
                continue
            self._deliver(run, key, items)
        self._count(sum(len(items) for items in by_run.values()), unrouted)

    def _deliver(self, run: Run, key: RunKey, items: list[ReceivedSample]) -> None:
        with run.lock:
            if run.samples is None:
                resource = ((names.EXPERIMENT, key[0]), (names.TRIAL, key[1]))
                run.samples = RunSamples(self._config, resource, run.merger.step, self._seed)
            parts: dict[tuple, list[ReceivedSample]] = {}
            for received in items:  # one part per sender's snapshot
                part = (received.resource, received.time_unix_nano, received.step)
                parts.setdefault(part, []).append(received)
            released: list[Snapshot] = []
            closed: set[int] = set()
            replayed = replaying()
            for part, group in parts.items():
                if not run.samples.fresh(part):  # a retried request's samples are here already
                    continue
                for received in group:
                    released.extend(run.samples.add(received, replayed))
                    origin = dict(received.resource).get(names.STREAM, "train")
                    if origin not in WAITING_STREAMS and received.step is not None:
                        closed.add(received.step)
            for step in sorted(closed):
                released.extend(run.samples.close_step(step))
            for snapshot in released:
                run.fanout.export(snapshot)

    def _count(self, routed: int, unrouted: int) -> None:
        with self._lock:
            self.received += routed + unrouted
            self.dropped += unrouted
            first = unrouted and not self._unrouted
            self._unrouted = self._unrouted + unrouted if unrouted else 0
        if first:
            logger.warning(
                "samples: %d samples name no run (no %s) or a run past limits.max_runs; "
                "dropped (counted)",
                unrouted,
                names.EXPERIMENT,
            )

    def release(self) -> None:
        """Queue every sample still waiting, at its run's last training step (the server
        stops: no request comes any more)."""
        for _, run in self._runs.items():
            with run.lock:
                released = run.samples.flush() if run.samples is not None else []
                for snapshot in released:
                    run.fanout.export(snapshot)

    def flush(self) -> bool:
        """True when no sample waits for its step (all are in their sinks' queues)."""
        return not any(
            run.samples is not None and run.samples.holding for _, run in self._runs.items()
        )

    def shutdown(self, timeout_s: float) -> None:
        """Nothing to close here: the server calls :meth:`release` before the services stop,
        and the samples' sinks are their runs', shut down with the pipeline."""
        del timeout_s
