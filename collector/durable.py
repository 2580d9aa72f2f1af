"""The collector's durable queue: a journal per sink under one state directory.

Layout: ``<directory>/shared/<sink>/`` for the sinks every snapshot reaches (Prometheus,
remote write), ``<directory>/runs/<run>/<sink>/`` for each run's step-based sinks, with
``<directory>/runs/<run>/run.json`` naming the run's experiment and trial so that a new
process can open it again and replay its journals before it takes any request
(:mod:`exporters.journal`). One collector holds the directory at a time (an exclusive
``flock`` on ``<directory>/lock``). After a clean shutdown every journal is empty and what
the collector wrote there is removed, unless a sink keeps its undelivered backlog there for
the next start (the remote-write sink during a receiver outage). ``<directory>/baselines/``
keeps the decoder's per-series baselines (:mod:`collector.baselines`); it stays after a clean
shutdown while it holds a series, so that the next process takes up the senders' running
totals where this one left them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
from pathlib import Path

from collector.baselines import DIRECTORY as BASELINES
from collector.baselines import Baselines
from collector.merge import RolloutMerger
from exporters.fanout import FanOut
from exporters.journal import Journal
from exporters.remote_write.kept_backlog import FILE as KEPT
from telemetry.model.errors import ConfigError
from telemetry.model.run import RunKey, run_name
from telemetry.otlp.decode import Decoder

__all__ = ["DurableState"]

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
MERGE = "rollout-merge"
"""A run's journal of rollout/eval windows waiting in its merger for their training step."""


class DurableState:
    """Journals of every sink of one collector, in ``directory``.

    Args:
        directory: the state directory; created if missing.
        limit_bytes: each sink's journal at most (a healthy sink refuses past it).
        fsync: fsync each journal once per accepted request.
        key: the config key named when the directory cannot be used.

    Raises:
        ConfigError: the directory cannot be created, or another collector holds it.
    """

    def __init__(self, directory: str | Path, limit_bytes: int, fsync: bool, key: str) -> None:
        self.directory = Path(directory)
        self.limit_bytes = limit_bytes
        self.fsync = fsync
        self._key = key
        self._journals: list[Journal] = []
        self.baselines: Baselines | None = None
        self._lock = threading.Lock()
        self._closed = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"{key}: cannot use {self.directory}: {exc}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise ConfigError(
                f"{key}: {self.directory} is held by another running collector; give each "
                "collector its own directory"
            ) from None

    def attach_shared(self, fanout: FanOut) -> None:
        """Journal every sink of the shared fan-out; queue what an earlier process left."""
        self._attach(fanout, self.directory / "shared")

    def attach_decoder(self, decoder: Decoder) -> None:
        """Keep ``decoder``'s per-series baselines here, synced with the journals, after
        giving it what an earlier process left (call before any request).

        Raises:
            ConfigError: the baselines' directory cannot be created or read.
        """
        try:
            self.baselines = Baselines(self.directory / BASELINES, decoder, self.fsync)
        except OSError as exc:
            raise ConfigError(f"{self._key}: {exc}") from None
        with self._lock:
            self._journals.append(self.baselines.journal)

    def attach_run(self, key: RunKey, fanout: FanOut, merger: RolloutMerger) -> None:
        """Journal every sink of run ``key``'s fan-out and its merger's windows; queue and
        merge again what an earlier process left."""
        part = self.directory / "runs" / _run_dir(key)
        part.mkdir(parents=True, exist_ok=True)
        marker = part / "run.json"
        if not marker.exists():
            marker.write_text(json.dumps({"experiment": key[0], "trial": key[1]}))
        self._attach(fanout, part)
        journal = self._open(part / MERGE)
        merger.journal_to(journal)
        with self._lock:
            self._journals.append(journal)

    def _open(self, directory: Path) -> Journal:
        journal = Journal(directory, self.limit_bytes, self.fsync)
        if journal.unreadable:
            logger.warning(
                "durable queue %s: %d torn or corrupt entries skipped",
                directory,
                journal.unreadable,
            )
        return journal

    def _attach(self, fanout: FanOut, part: Path) -> None:
        names = {_UNSAFE.sub("_", queued.name) for queued in fanout.queued} | {MERGE}
        for left in sorted(part.glob("*")):
            held = any(left.glob("*.seg")) or (left / KEPT).exists()
            if left.is_dir() and left.name not in names and held:
                logger.warning("durable queue: %s is no sink of this collector: left there", left)
        for queued in fanout.queued:
            journal = self._open(part / _UNSAFE.sub("_", queued.name))
            queued.journal_to(journal)
            with self._lock:
                self._journals.append(journal)

    def stored_runs(self) -> list[RunKey]:
        """The runs an earlier process left journals of, oldest directory first."""
        runs: list[RunKey] = []
        for marker in sorted((self.directory / "runs").glob("*/run.json")):
            try:
                data = json.loads(marker.read_text())
                runs.append((str(data["experiment"]), str(data["trial"])))
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("durable queue: %s unreadable: %s", marker, exc)
        return runs

    def sync(self) -> None:
        """Make every journal's appends durable.

        Raises:
            OSError: a write or fsync failed.
        """
        with self._lock:
            journals = list(self._journals)
        for journal in journals:
            journal.sync()

    def close(self) -> None:
        """After the sinks' shutdown: remove the directory if no journal holds anything;
        safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            journals, self._journals = self._journals, []
        if self.baselines is not None:
            self.baselines.close()  # the last request's baselines in state.json
        for journal in journals:
            journal.close()  # its acknowledged segments go
        # Anything left (a sink not held yet, a run not opened, a sink no longer run, a
        # backlog a sink keeps for the next start) stays.
        if not any(self.directory.rglob("*.seg")) and not any(self.directory.rglob(KEPT)):
            for part in ("shared", "runs"):
                shutil.rmtree(self.directory / part, ignore_errors=True)
            (self.directory / "lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # something of the user's there too: it stays
                self.directory.rmdir()
        os.close(self._lock_fd)


def _run_dir(key: RunKey) -> str:
    """A directory name for run ``key``: readable, and distinct for distinct runs."""
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:12]
    return f"{_UNSAFE.sub('_', run_name(*key))[:80]}-{digest}"
