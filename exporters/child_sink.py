"""A run sink in a child process: how one process serves several runs of a tracker that
keeps one run (or one data directory) per process.

SwanLab keeps its run in module globals; Trackio fixes its data directory when it is
imported. The collector builds one :class:`ChildSink` per ``<experiment>_<trial>`` run;
each spawns a process that owns the run's sink and receives Snapshots over a pipe. A child
that stalls past the export timeout costs that export (FAILURE) and never blocks the
caller or other runs.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from exporters.base import ExportResult, Sink
from telemetry.config import StatsLoggerConfig
from telemetry.model.run import run_name
from telemetry.model.snapshot import Snapshot

__all__ = ["ChildSink", "SinkBuilder"]

logger = logging.getLogger(__name__)

SinkBuilder = Callable[[StatsLoggerConfig, Mapping[str, Any] | None], Sink]
"""``(config, experiment) -> sink`` run in the child: a module-level function (it is
pickled by name). The sink it returns has ``run_dir``."""


class ChildSink(Sink):
    """Runs the sink ``build`` makes for one run in its own spawned process.

    Args:
        name: the sink's name (in errors and logs).
        build: makes the sink in the child (:data:`SinkBuilder`).
        config: the stats_logger configuration of this run.
        experiment: the experiment config logged with the run (default: ``config``'s).
        start_timeout_s: how long to wait for the child's sink to start.

    Raises:
        RuntimeError: the child failed to build its sink (the message carries the child's
            error, e.g. a missing module or an unwritable log directory) or timed out.
    """

    def __init__(
        self,
        name: str,
        build: SinkBuilder,
        config: StatsLoggerConfig,
        experiment: Mapping[str, Any] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._closed = False
        self._seq = 0
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        run = run_name(config.experiment_name, config.trial_name)
        self._process = ctx.Process(
            target=_serve,
            args=(child_conn, build, config, experiment),
            name=f"rltel-{name}-{run}",
            daemon=True,
        )
        self._process.start()
        child_conn.close()
        reply = self._receive(None, start_timeout_s)
        if reply is None or reply[0] != "ready":
            self._stop(1.0)
            detail = "timed out" if reply is None else reply[1]
            raise RuntimeError(f"{name}: sink process for run {run!r} failed to start: {detail}")
        self.run_dir: str | None = reply[1]

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Send one snapshot to the child; FAILURE when it is gone or answers too late."""
        reply = self._call("export", snapshot, timeout_s)
        if reply is None:
            return ExportResult.PERMANENT_FAILURE if self._closed else ExportResult.FAILURE
        return ExportResult(reply[1])

    def skip_held_steps(self, timeout_s: float = 120.0) -> None:
        """The child's sink skips what its run already holds (when it can tell)."""
        self._call("skip_held_steps", None, timeout_s)

    def _call(self, op: str, payload: Any, timeout_s: float) -> tuple | None:
        """The child's reply to ``op``; None when closed, gone, broken or too late."""
        with self._lock:
            if self._closed or not self._process.is_alive():
                return None
            self._seq += 1
            try:
                self._conn.send((self._seq, op, payload))
            except (OSError, ValueError):
                logger.exception("%s: sink process pipe is broken", self.name)
                return None
            reply = self._receive(self._seq, timeout_s)
        if reply is None:
            logger.warning("%s: sink process did not answer within %.1f s", self.name, timeout_s)
        return reply

    def _receive(self, seq: int | None, timeout_s: float) -> tuple | None:
        """The reply to request ``seq`` (``None``: the start message); late replies are skipped."""
        try:
            while self._conn.poll(timeout_s):
                reply = self._conn.recv()
                if seq is None or reply[0] == seq:
                    return reply
        except (EOFError, OSError):
            return None
        return None

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Finish the child's run and stop the process; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._process.is_alive():
                self._seq += 1
                try:
                    self._conn.send((self._seq, "shutdown", None))
                    self._receive(self._seq, timeout_s)
                except (OSError, ValueError):
                    logger.exception("%s: sink process pipe is broken", self.name)
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        self._process.join(timeout_s)
        if self._process.is_alive():
            logger.warning("%s: killing sink process %s", self.name, self._process.pid)
            self._process.kill()
            self._process.join(1.0)
        self._conn.close()


def _serve(
    conn: Connection,
    build: SinkBuilder,
    config: StatsLoggerConfig,
    experiment: Mapping[str, Any] | None,
) -> None:
    """Child process: own one sink and answer requests until shutdown or EOF."""
    try:
        sink = build(config, experiment)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", sink.run_dir))
    try:
        while True:
            seq, op, snapshot = conn.recv()
            if op == "shutdown":
                sink.shutdown()
                conn.send((seq, "done"))
                return
            if op == "skip_held_steps":
                sink.skip_held_steps()
                conn.send((seq, "done"))
                continue
            conn.send((seq, sink.export(snapshot).value))
    except EOFError:
        sink.shutdown()
