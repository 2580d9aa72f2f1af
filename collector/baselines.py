"""The decoder's per-series baselines on disk: a restarted collector takes up every series.

Rollout and eval workers send scalar streams as running totals (cumulative), and other OTel
senders may send cumulative histograms or delta sums; the decoder turns them into windows and
totals with one state per series (:mod:`telemetry.otlp.temporality`). Kept in memory only, a
restart would take each series' first total after it as a new baseline and lose what the
worker sent between its last acknowledged request and that one. So the collector keeps the
state in ``<durable directory>/baselines/``:

- ``state.json``: every series' state, the decoder's start and the last log record it
  includes (``seq``); written whole to a temporary file and renamed over the old one.
- ``*.seg``: a log (:class:`exporters.journal.Journal` framing: length, CRC-32, sequence
  number) with one record per accepted request that changed a series: the changed series.

A request's record is written when its decode block ends, after its snapshots went into the
sinks' and the merger's journals, and synced with them before the request is answered. So
the file never holds a baseline ahead of the windows the journals hold: a kill between the
two leaves the old baseline, the request is not answered, and its retry makes the same window
again, which the merger and the step-based sinks recognise as one they hold. When the log
holds more than twice the state (at least :data:`COMPACT_BYTES`), the state is written again
and the log acknowledged. At start, before any request, the state and the log records after
it are given back to the decoder. The file holds exactly the decoder's table, bounded by its
series limits (``limits.max_series_per_metric``, ``max_series_total``); a clean shutdown
writes the state once more, and removes the directory when no series is kept.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from collector.signal_journal import request_journal
from telemetry.otlp.decode import Decoder
from telemetry.otlp.series import SeriesState
from telemetry.otlp.temporality import HistogramState, SumState

__all__ = ["COMPACT_BYTES", "DIRECTORY", "Baselines", "from_json", "to_json"]

logger = logging.getLogger(__name__)

DIRECTORY = "baselines"
"""The baselines' directory under the durable state directory."""
STATE = "state.json"
COMPACT_BYTES = 1 << 20
"""The log is folded into ``state.json`` once it holds this many bytes (and twice the state)."""
VERSION = 1


class Baselines:
    """Keeps ``decoder``'s per-series state in ``directory`` and gives back what is there.

    Args:
        directory: ``<durable directory>/baselines``; created if missing.
        decoder: the collector's decoder; its state is restored here, before any request,
            and its :attr:`~telemetry.otlp.decode.Decoder.on_commit` is set.
        fsync: fsync the log with every request's :meth:`sync`, and the state file.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(self, directory: str | Path, decoder: Decoder, fsync: bool) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.journal = request_journal(self.directory, sys.maxsize, fsync)  # never full
        self._lock = threading.Lock()
        self._log_bytes = 0
        self._state_bytes = 0
        started_ns, series, seq = self._read_state()
        replayed = 0
        for record_seq, payload in self.journal.pending:
            if record_seq <= seq:
                continue  # folded into the state already (a kill before the log's ack)
            try:
                series.update(from_json(json.loads(payload)))
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                logger.warning("baselines %s: record %d unreadable: %s", directory, record_seq, exc)
            replayed += 1
        self.journal.pending = []
        if self.journal.unreadable:
            logger.warning(
                "baselines %s: %d torn records skipped", directory, self.journal.unreadable
            )
        left_out = decoder.restore_state(started_ns or decoder.started_ns, list(series.items()))
        if left_out:
            logger.warning(
                "baselines %s: %d series past the series limits left out", directory, left_out
            )
        self.started_ns, items = decoder.export_state()
        self._series: dict[tuple, SeriesState] = dict(items)
        if series or replayed:
            logger.info("baselines %s: %d series taken up", directory, len(self._series))
        self._compact()  # the start is kept from now on, and the log starts empty
        decoder.on_commit = self.record

    def __len__(self) -> int:
        """Series kept."""
        with self._lock:
            return len(self._series)

    def _read_state(self) -> tuple[int, dict[tuple, SeriesState], int]:
        """``(started_ns, series, seq)`` of ``state.json``; empty when there is none."""
        path = self.directory / STATE
        try:
            data = json.loads(path.read_text())
            if data["version"] != VERSION:
                raise ValueError(f"version {data['version']!r}, not {VERSION}")
            series = dict(from_json(data["series"]))
            return int(data["started_ns"]), series, int(data["seq"])
        except FileNotFoundError:
            return 0, {}, -1
        except (OSError, ValueError, TypeError, KeyError, IndexError) as exc:
            logger.warning("baselines %s unreadable, series start anew: %s", path, exc)
            return 0, {}, -1

    def record(self, changed: dict[tuple, SeriesState]) -> None:
        """Log the series one accepted request changed (the decoder's ``on_commit``); a
        failed write is raised by the next :meth:`sync` (the request is refused)."""
        payload = json.dumps(to_json(changed.items())).encode()
        with self._lock:
            self._series.update(changed)
            if self.journal.append(payload) is None:
                return
            self._log_bytes += len(payload)
            if self._log_bytes >= max(COMPACT_BYTES, 2 * self._state_bytes):
                self._compact()

    def _compact(self) -> None:
        """Write every series to ``state.json`` and acknowledge the log records it holds."""
        seq = self.journal.last_seq
        body = json.dumps(
            {
                "version": VERSION,
                "started_ns": self.started_ns,
                "seq": seq,
                "series": to_json(self._series.items()),
            }
        ).encode()
        tmp = self.directory / (STATE + ".tmp")
        try:
            with open(tmp, "wb") as out:
                out.write(body)
                if self.fsync:
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(tmp, self.directory / STATE)
        except OSError as exc:  # the log keeps every record meanwhile
            logger.warning("baselines %s: cannot write %s: %s", self.directory, STATE, exc)
            return
        self._state_bytes, self._log_bytes = len(body), 0
        self.journal.ack(seq)

    def close(self) -> None:
        """At a clean shutdown, after the last request: write the state once more (or remove
        the directory when no series is kept); safe to call twice."""
        with self._lock:
            self.journal.close()
            if self._series:
                self._compact()
                return
        shutil.rmtree(self.directory, ignore_errors=True)


def to_json(series: Any) -> list:
    """``(key, state)`` pairs as JSON values: ``[resource, [series of it, ...]]`` per
    resource (tuples are written as JSON arrays)."""
    by_resource: dict[tuple, list] = {}
    for (kind, resource, name, attrs), state in series:
        entries = by_resource.get(resource)
        if entries is None:
            entries = by_resource[resource] = []
        if isinstance(state, HistogramState):
            entries.append(
                (
                    kind,
                    name,
                    attrs,
                    "h",
                    state.start_time_unix_nano,
                    state.count,
                    state.sum,
                    state.min,
                    state.max,
                    state.bounds,
                    state.bucket_counts,
                )
            )
        else:
            entries.append((kind, name, attrs, "s", state.start_time_unix_nano, state.total))
    return [[resource, entries] for resource, entries in by_resource.items()]


def from_json(data: list) -> list[tuple[tuple, SeriesState]]:
    """The ``(key, state)`` pairs :func:`to_json` wrote.

    Raises:
        ValueError, TypeError, KeyError, IndexError: not what :func:`to_json` writes.
    """
    out: list[tuple[tuple, SeriesState]] = []
    for resource_pairs, entries in data:
        resource = _pairs(resource_pairs)
        for kind, name, attrs, form, start, *value in entries:
            key = (str(kind), resource, str(name), _pairs(attrs))
            state: SeriesState
            if form == "h":
                count, total, low, high, bounds, buckets = value
                state = HistogramState(
                    int(start),
                    int(count),
                    float(total),
                    None if low is None else float(low),
                    None if high is None else float(high),
                    tuple(float(b) for b in bounds),
                    tuple(int(c) for c in buckets),
                )
            elif form == "s":
                (total,) = value
                state = SumState(int(start), float(total))
            else:
                raise ValueError(f"unknown series state {form!r}")
            out.append((key, state))
    return out


def _pairs(items: list) -> tuple:
    """Attributes as the decoder keys them: ``((name, value), ...)``."""
    return tuple((str(k), v) for k, v in items)
