"""The remote-write sink: the Prometheus sink's series, pushed to a remote-write receiver.

Each snapshot is folded into a :class:`~exporters.prometheus.store.SeriesStore` (the same
names, labels and histogram companions as the exposition), and the series it touched are
written with one sample each, timestamped at export (strictly increasing per sink, so a
receiver never sees two values of a series at one millisecond). A refresher thread writes
every live series each ``interval_s``, as a scrape would, so unchanged series stay current.

Writes wait in a backlog bounded by ``max_pending_samples`` (oldest dropped and counted)
and are sent in order, in batches: 2xx delivers, 429/5xx/connection errors are retried with
backoff within the export's deadline (while the receiver stays down, once per call, so
snapshots move into the backlog) and again on the next export or refresh; other 4xx are
dropped as permanent. ``export`` answers FAILURE while its write is not delivered; the
fan-out retries it (the snapshot is folded in once). ``shutdown`` drains with a deadline.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from collector.config import CLUSTER_LABEL, COLLECTOR_LABEL, RemoteWriteConfig
from exporters.base import ExportResult, Sink
from exporters.prometheus.store import SeriesStore
from exporters.remote_write import client, proto
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

BACKOFF_S, MAX_BACKOFF_S = 0.1, 2.0
DEADLINE_SHARE = 0.8  # of an export's timeout: the rest is margin before the fan-out abandons it


class _Write:
    """One encoded write waiting in the backlog (compared by identity)."""

    __slots__ = ("payload", "samples")

    def __init__(self, payload: bytes, samples: int) -> None:
        self.payload, self.samples = payload, samples


class RemoteWriteSink(Sink):
    """Writes the collector's series to a Prometheus remote-write endpoint.

    Args:
        config: an enabled ``remote_write`` section (its schema requires ``url`` then): url,
            external labels, timeouts, backlog bound, refresh interval.
        clock: monotonic seconds (series expiry).
        wall: Unix seconds (sample timestamps).
    """

    name = "remote_write"

    def __init__(
        self,
        config: RemoteWriteConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
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
        self._store_lock = threading.Lock()  # store, backlog, counters: never held for I/O
        self._send_lock = threading.Lock()  # one sender at a time, in backlog order
        self._backlog: deque[_Write] = deque()
        self._pending = 0
        self._last_ms = 0
        self._applied: Snapshot | None = None
        self._down = False  # the last POST failed retryably: try once per call, no backoff
        self.dropped_samples = self.rejected_samples = self.retries = 0
        self._closed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._refresh_loop, name="rltel-remote-write", daemon=True
        )
        self._thread.start()

    # -- sink contract -----------------------------------------------------------------

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Fold ``snapshot`` in (once, also when retried) and write the series it touched."""
        deadline = time.monotonic() + timeout_s * DEADLINE_SHARE
        if self._closed:
            return ExportResult.PERMANENT_FAILURE
        with self._store_lock:
            if snapshot is not self._applied:
                since = self._store.clock()
                try:
                    self._store.apply(snapshot)
                except Exception as exc:  # a malformed snapshot cannot succeed on retry
                    logger.warning("remote_write sink: snapshot rejected: %s", exc)
                    return ExportResult.PERMANENT_FAILURE
                self._applied = snapshot
                self._enqueue(self._store.collect(since))
        return self._send(deadline)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Send the backlog; True when nothing is left."""
        return self._send(time.monotonic() + timeout_s) is ExportResult.SUCCESS

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop refreshing, send the backlog until ``timeout_s``, drop what is left."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._send(deadline)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._store_lock:
            if self._pending:
                logger.warning(
                    "remote_write sink: %d samples undelivered at shutdown", self._pending
                )
            self.dropped_samples += self._pending
            self._backlog.clear()
            self._pending = 0

    @property
    def pending_samples(self) -> int:
        """Samples waiting for the receiver."""
        with self._store_lock:
            return self._pending

    # -- backlog -----------------------------------------------------------------------

    def _enqueue(self, families: Iterable) -> None:
        """Encode the samples of ``families`` as one write; called under the store lock."""
        now_ms = max(int(self._wall() * 1000), self._last_ms + 1)
        payload, n = proto.encode(self._series(families), now_ms)
        if not n:
            return
        self._last_ms = now_ms
        self._backlog.append(_Write(payload, n))
        self._pending += n
        while self._pending > self.config.max_pending_samples and len(self._backlog) > 1:
            dropped = self._backlog.popleft()
            self._pending -= dropped.samples
            self.dropped_samples += dropped.samples
            if self.dropped_samples == dropped.samples:
                logger.warning("remote_write sink: backlog full, oldest samples dropped (counted)")

    def _series(self, families: Iterable) -> Iterator[proto.Series]:
        external = self.external_labels
        for family in families:
            for sample in family.samples:
                labels = {**external, **sample.labels, "__name__": sample.name}
                yield sorted(labels.items()), float(sample.value)

    def _send(self, deadline: float, wait: bool = True) -> ExportResult:
        """Send the backlog in order until it is empty, refused or the deadline passes."""
        timeout = max(0.0, deadline - time.monotonic()) if wait else 0.0
        if not self._send_lock.acquire(timeout=timeout):
            return ExportResult.FAILURE
        try:
            return self._send_locked(deadline)
        finally:
            self._send_lock.release()

    def _send_locked(self, deadline: float) -> ExportResult:
        delay, result, was_down = BACKOFF_S, ExportResult.SUCCESS, self._down
        while True:
            with self._store_lock:
                batch, samples = [], 0
                for write in self._backlog:
                    if batch and samples + write.samples > self.config.max_batch_samples:
                        break
                    batch.append(write)
                    samples += write.samples
            if not batch:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0.01:
                return ExportResult.FAILURE
            payload = b"".join(write.payload for write in batch)
            outcome, detail = client.post(
                self.config.url, payload, min(self.config.timeout_s, remaining)
            )
            if outcome is ExportResult.FAILURE:
                if not self._down:
                    logger.warning("remote_write sink: %s; retrying", detail)
                self._down = True
                if was_down or delay > deadline - time.monotonic():
                    return ExportResult.FAILURE
                time.sleep(delay)
                with self._store_lock:
                    self.retries += 1
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay, self._down = BACKOFF_S, False
            with self._store_lock:
                sent = {id(write) for write in batch}
                while self._backlog and id(self._backlog[0]) in sent:
                    self._pending -= self._backlog.popleft().samples
                if outcome is ExportResult.PERMANENT_FAILURE:
                    self.rejected_samples += samples
            if outcome is ExportResult.PERMANENT_FAILURE:
                logger.warning("remote_write sink: %d samples refused: %s", samples, detail)
                result = ExportResult.PERMANENT_FAILURE

    # -- refresher ---------------------------------------------------------------------

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            try:
                with self._store_lock:
                    self._store.expire()
                    self._enqueue(self._store.collect())
                self._send(time.monotonic() + self.config.timeout_s, wait=False)
            except Exception:  # a bug of ours must not end the refresher
                logger.exception("remote_write sink: refresh failed")
