"""The remote-write sink: the Prometheus sink's series, pushed to a remote-write receiver.

Each snapshot is folded into a :class:`~exporters.prometheus.store.SeriesStore` (the same
names, labels and cumulative histograms as the exposition), and the series it touched are
encoded with their cumulative values at the snapshot's commit time
(:class:`~exporters.remote_write.timeline.Timeline`: in order per series). ``export``
returns once the write is in the backlog; a sender thread delivers the backlog in order,
in batches, so an outage delays samples without changing their timestamps, and the
collector's queue in front of this sink never fills because of the receiver.

The backlog is the one bound: ``max_pending_samples`` waiting (the batch being sent, at
most ``max_batch_samples``, comes on top); past it the oldest writes are dropped. 429, 5xx
and connection errors are retried with backoff, the same batch until it is delivered; a 400
for some of its samples (out of order, out of bounds, a duplicate) sends the batch again in
halves (:mod:`exporters.remote_write.salvage`) so only the samples refused alone are dropped;
another 4xx drops the batch; a write older than ``max_sample_age_s`` when its turn comes is
dropped unsent (a receiver refuses the whole request for one sample past its accepted age).
Every drop is counted and makes the next refresh write every series' current total, so
cumulative series re-converge.

A refresher thread writes, every ``interval_s``, the series idle for that long (as a scrape
would, so unchanged series stay current), and the collector's own metrics (its sources:
the sink's counters, ``up``, and what the server adds with :meth:`add_source`).
``shutdown`` drains with a deadline and counts what is left; with the collector's durable
queue (:meth:`RemoteWriteSink.keep_in`) it keeps what is left for the next start instead,
without waiting while the receiver is down (:mod:`exporters.remote_write.kept_backlog`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client.registry import Collector

from exporters.base import ExportResult, Sink
from exporters.prometheus.families import declared
from exporters.prometheus.sink import SELF_METRICS
from exporters.prometheus.store import SeriesStore
from exporters.remote_write import client, kept_backlog, proto
from exporters.remote_write.config import (
    CLUSTER_LABEL,
    COLLECTOR_JOB,
    COLLECTOR_LABEL,
    RemoteWriteConfig,
)
from exporters.remote_write.health import DOWN, LinkHealth
from exporters.remote_write.salvage import Salvage, per_sample
from exporters.remote_write.sources import Sources, StoreFamilies, Up
from exporters.remote_write.timeline import Timeline
from exporters.remote_write.writes import Write, Writes
from exporters.retry import retry
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

BACKOFF_S, MAX_BACKOFF_S = 0.1, 2.0  # the first retry's delay, and the longest
DEADLINE_SHARE = 0.8  # of a flush's timeout: the rest is margin before the queue abandons it
RESENT = "re-sent as current totals by the next refresh"


class RemoteWriteSink(Sink):
    """Writes the collector's series to a Prometheus remote-write endpoint.

    Args:
        config: an enabled ``remote_write`` section (its schema requires ``url`` then).
        clock: monotonic seconds (series expiry).
        wall: Unix seconds (timestamps of snapshots without one, refreshes, sample age).
        summary_s: seconds between two log summaries while the receiver is degraded.

    Attributes:
        health: the sample counters and link state (:meth:`LinkHealth.collect` gives the
            ``rltel_collector_remote_write_*`` families, :meth:`LinkHealth.problem` the
            ``/healthz`` line).
    """

    name = "remote_write"

    def __init__(
        self,
        config: RemoteWriteConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        summary_s: float = 60.0,
    ) -> None:
        self.config = config
        self._wall = wall
        self._store = SeriesStore(config.series_limit, config.expire_seconds, clock)
        external = {
            COLLECTOR_LABEL: config.collector or socket.gethostname(),
            CLUSTER_LABEL: config.cluster,
            **config.external_labels,
        }
        self.external_labels = dict(sorted(external.items()))
        self._own_labels = {"job": COLLECTOR_JOB, "instance": external[COLLECTOR_LABEL]}
        self._timeline = Timeline(self.external_labels)
        self._lock = threading.Lock()  # store, timeline, backlog: never held for I/O
        self._cond = threading.Condition(self._lock)
        self._writes = Writes()
        self._keep: kept_backlog.KeptBacklog | None = None  # where a shutdown keeps the backlog
        self._resync = False
        self.health = LinkHealth(config.url or "", lambda: self._writes.pending, summary_s)
        self._sources = Sources()
        self._errors = 0  # snapshots the store rejected
        self.add_source(self.health)
        self.add_source(Up())
        self._store.reserve(SELF_METRICS)  # its store's own, as the Prometheus sink's
        self._write_too(StoreFamilies(self._store, self._lock, lambda: self._errors))
        self._closed = False
        self._drain_until: float | None = None  # set by shutdown: the sender's deadline
        self._abandoned = False  # shutdown counted what was left; the sender must not
        self._stop = threading.Event()
        self._sender = threading.Thread(
            target=self._send_loop, name="rltel-remote-write-send", daemon=True
        )
        self._refresher = threading.Thread(
            target=self._refresh_loop, name="rltel-remote-write-refresh", daemon=True
        )
        self._sender.start()
        self._refresher.start()

    def add_source(self, source: Collector, own: bool = True) -> None:
        """Write ``source``'s families every ``interval_s`` too (``job="rltel-collector"``,
        ``instance`` the collector label; a series gone since is ended, as a scrape would).

        Args:
            source: its ``collect()`` yields families, its ``describe()`` names them
                (:mod:`exporters.prometheus.families`); those names are kept out of the
                snapshot metrics' names.
            own: the collector's own metrics, only with ``self_metrics`` (else: always).
        """
        names = declared(source)
        with self._lock:
            self._store.reserve(names)
        self._write_too(source, own)

    def _write_too(self, source: Collector, own: bool = True) -> None:
        if self.config.self_metrics or not own:
            self._sources.add(source)

    def keep_in(self, directory: str | Path) -> None:
        """Keep the backlog in ``directory`` at shutdown (the collector's durable state), and
        send what an earlier process kept there first, its series' timestamps taken up."""
        keep = kept_backlog.KeptBacklog(directory)
        taken_up = keep.take_up()
        if taken_up is None:
            return
        writes, last = taken_up
        with self._cond:
            self._keep = keep
            self._timeline.take_up(last)
            self._writes.put_first([Write(*write, kept=True) for write in writes])
            self._cond.notify_all()

    # -- sink contract -----------------------------------------------------------------

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Fold ``snapshot`` in and queue the series it touched at its commit time."""
        del timeout_s
        if self._closed:
            return ExportResult.PERMANENT_FAILURE
        at_ms = snapshot.time_unix_nano // 1_000_000 or int(self._wall() * 1000)
        with self._lock:
            since = self._store.clock()
            try:
                self._store.apply(snapshot)
            except Exception as exc:  # a malformed snapshot cannot succeed on retry
                self._errors += 1
                logger.warning("remote_write sink: snapshot rejected: %s", exc)
                return ExportResult.PERMANENT_FAILURE
            self._enqueue(self._timeline.stamp(self._store.collect(since), at_ms))
        return ExportResult.SUCCESS

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """True once everything given so far is delivered (or dropped).

        Waits at most ``DEADLINE_SHARE`` of ``timeout_s``, and not at all while the receiver
        is down: the queue in front flushes after exports (the durable queue
        acknowledges its journal so, keeping what is undelivered on disk), and an outage
        must not hold it up.
        """
        with self._cond:
            self._cond.wait_for(
                lambda: not self._writes.pending or self.health.state == DOWN,
                timeout_s * DEADLINE_SHARE,
            )
            return not self._writes.pending

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop refreshing, send the backlog until ``timeout_s``; keep the rest for the next
        start (:meth:`keep_in`; at once while the receiver is down), else drop and count it.

        Raises:
            OSError: the rest could not be kept (it is counted as dropped).
        """
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        if self._keep is not None and self.health.state == DOWN:
            deadline = time.monotonic()  # nothing to wait for: the next start sends it
        self._stop.set()
        with self._cond:
            self._drain_until = deadline
            self._cond.notify_all()
        self._sender.join(max(0.0, deadline - time.monotonic()))
        self._refresher.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            left = self._writes.pending
            writes = self._writes.clear()
            self._abandoned = True
            self._cond.notify_all()
            last = self._timeline.last()
        if self._keep is None:
            if left:
                self.health.dropped("shutdown", left, "undelivered at shutdown")
            return
        try:
            self._keep.keep([(w.payload, w.samples, w.newest_ms) for w in writes], last)
        except OSError as exc:
            self.health.dropped("shutdown", left, f"undelivered at shutdown, not kept: {exc}")
            raise

    @property
    def pending_samples(self) -> int:
        """Samples waiting for the receiver."""
        return self._writes.pending

    # -- backlog -----------------------------------------------------------------------

    def _enqueue(self, samples: list[proto.Sample]) -> None:
        """Encode ``samples`` as one write at the backlog's tail; called under the lock."""
        late = self._timeline.late
        if late:
            self._timeline.late = 0
            self.health.late(late)
        if not samples:
            return
        if self._abandoned:  # a refresh that outlived shutdown's deadline: nobody sends it
            self.health.dropped("shutdown", len(samples), "written after shutdown ended")
            return
        payload, n = proto.encode(samples)
        write = Write(payload, n, max(ts for _, _, ts in samples))
        gone = self._writes.add(write, self.config.max_pending_samples)
        self._left(gone)
        dropped = sum(write.samples for write in gone)
        if dropped:
            self._resync = True
            self.health.dropped(
                "backlog_full",
                dropped,
                f"backlog full (max_pending_samples={self.config.max_pending_samples}): "
                f"oldest writes dropped; {RESENT}",
            )
        self._cond.notify_all()

    def _take(self) -> list[Write]:
        """The next batch, taken off the backlog (too old writes dropped); under the lock."""
        oldest_ms = int(self._wall() * 1000) - int(self.config.max_sample_age_s * 1000)
        batch, gone = self._writes.take(oldest_ms, self.config.max_batch_samples)
        self._left(gone)
        too_old = sum(write.samples for write in gone)
        if too_old:
            self._resync = True
            self.health.dropped(
                "too_old",
                too_old,
                f"older than max_sample_age_s={self.config.max_sample_age_s:g} "
                f"(the receiver would refuse them); {RESENT}",
            )
            self._cond.notify_all()
        return batch

    def _left(self, writes: Iterable[Write]) -> None:
        """``writes`` left the backlog for good (under the lock)."""
        if self._keep is not None:
            self._keep.gone(sum(1 for write in writes if write.kept))

    def _done(self, taken: int, refused: int, detail: str) -> bool:
        """The batch left: ``taken`` samples delivered, ``refused`` refused; counted before a
        flush waiting for it returns. False when shutdown gave it up first."""
        with self._cond:
            if self._abandoned:
                return False
            if taken:
                self.health.delivered(taken)
            if refused:
                self.health.refused(refused, detail)
                self._resync = True
            self._left(self._writes.done())
            self._cond.notify_all()
            return True

    # -- sender ------------------------------------------------------------------------

    def _send_loop(self) -> None:
        try:
            self._send_all()
        except Exception:  # a bug of ours: log it; shutdown counts what is left
            logger.exception("remote_write sink: sender failed")

    def _send_all(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._abandoned:
                        return
                    batch = self._take()
                    if batch:
                        break
                    if self._drain_until is not None:
                        return
                    self._cond.wait()
            if self._past_deadline():
                return  # shutdown's deadline: what is left is counted there
            sending = _Sending(b"".join(write.payload for write in batch), self._post)
            outcome, detail = retry(
                sending.attempt,
                _failed,
                self._pause,
                backoff_s=BACKOFF_S,
                max_backoff_s=MAX_BACKOFF_S,
            )
            if outcome is ExportResult.FAILURE:
                return  # cut short by shutdown, not by the receiver: counted there
            samples = sum(write.samples for write in batch)
            if sending.salvage is not None:
                taken, refused = sending.salvage.taken, sending.salvage.refused
                detail += f"; the write's other {taken} samples sent in parts"
            else:
                taken = samples if outcome is ExportResult.SUCCESS else 0
                refused = samples - taken
            if not self._done(taken, refused, detail):
                return  # shutdown counted this batch as dropped already

    def _pause(self, answer: tuple[ExportResult, str], wait_s: float) -> bool:
        """Count a failed try and wait ``wait_s`` before the next, unless shutdown's deadline
        passed or shutdown gave the backlog up."""
        if self._past_deadline():
            return False
        self.health.failed(answer[1], retry=True)
        with self._cond:
            self._cond.notify_all()  # a flush waiting for delivery stops waiting
            self._cond.wait_for(lambda: self._abandoned, wait_s)
        return not self._abandoned and not self._past_deadline()

    def _past_deadline(self) -> bool:
        until = self._drain_until
        return until is not None and until - time.monotonic() <= 0.01

    def _post(self, payload: bytes) -> tuple[ExportResult, str]:
        """One request, its timeout cut to shutdown's deadline (past it: FAILURE, unsent)."""
        timeout_s, until = self.config.timeout_s, self._drain_until
        if until is not None:
            remaining = until - time.monotonic()
            if remaining <= 0.01:
                return ExportResult.FAILURE, "shutdown's deadline passed"
            timeout_s = min(timeout_s, remaining)
        return client.post(self.config.url or "", payload, timeout_s)

    # -- refresher ---------------------------------------------------------------------

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                self.refresh()
            except Exception:  # a bug of ours must not end the refresher
                logger.exception("remote_write sink: refresh failed")

    def refresh(self) -> None:
        """Queue, at the current time, the series idle for ``interval_s`` (every series after
        a drop) and the sources' families."""
        now_ms = int(self._wall() * 1000)
        own = self._sources.collect()
        with self._lock:
            self._store.expire()
            idle_ms = None if self._resync else int(self.config.interval_s * 1000)
            self._resync = False
            samples = self._timeline.idle(self._store.collect(), now_ms, idle_ms)
            samples += self._sources.write(self._timeline, own, now_ms, self._own_labels)
            self._timeline.forget_unseen()
            self._enqueue(samples)


def _failed(answer: tuple[ExportResult, str]) -> bool:
    return answer[0] is ExportResult.FAILURE


class _Sending:
    """One batch's tries: the whole write, then, once the receiver refused some of its
    samples, the write in parts (:class:`~exporters.remote_write.salvage.Salvage`)."""

    def __init__(self, payload: bytes, post: Callable[[bytes], tuple[ExportResult, str]]):
        self.payload = payload
        self.post = post
        self.salvage: Salvage | None = None

    def attempt(self) -> tuple[ExportResult, str]:
        if self.salvage is None:
            outcome, detail = self.post(self.payload)
            if not per_sample(outcome, detail):
                return outcome, detail
            self.salvage = Salvage(self.payload, detail)
        return self.salvage.send(self.post)
