"""A SwanlabSink in a child process: how one collector process serves several SwanLab runs.

SwanLab keeps its run in module globals (one run per process). The collector builds one
``SwanlabProcessSink`` per ``<experiment>_<trial>`` run; each spawns a process that owns a
:class:`SwanlabSink` and receives Snapshots over a pipe. A child that stalls past the
export timeout costs that export (FAILURE) and never blocks the caller or other runs.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from exporters.base import ExportResult, Sink
from telemetry.config import StatsLoggerConfig
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)


class SwanlabProcessSink(Sink):
    """Runs a :class:`SwanlabSink` for one run in its own spawned process.

    Args:
        config: the stats_logger configuration of this run.
        experiment: the experiment config logged with the run (default: ``config``'s).
        start_timeout_s: how long to wait for the child's ``swanlab.init``.

    Raises:
        RuntimeError: the child failed to build its sink (the message carries the child's
            error, e.g. a missing module or an unwritable log directory) or timed out.
    """

    name = "swanlab"

    def __init__(
        self,
        config: StatsLoggerConfig,
        experiment: Mapping[str, Any] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._seq = 0
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        run = f"{config.experiment_name}_{config.trial_name}"
        self._process = ctx.Process(
            target=_serve,
            args=(child_conn, config, experiment),
            name=f"rltel-swanlab-{run}",
            daemon=True,
        )
        self._process.start()
        child_conn.close()
        reply = self._receive(None, start_timeout_s)
        if reply is None or reply[0] != "ready":
            self._stop(1.0)
            detail = "timed out" if reply is None else reply[1]
            raise RuntimeError(f"swanlab: sink process for run {run!r} failed to start: {detail}")
        self.run_dir: str | None = reply[1]

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Send one snapshot to the child; FAILURE when it is gone or answers too late."""
        with self._lock:
            if self._closed:
                return ExportResult.PERMANENT_FAILURE
            if not self._process.is_alive():
                return ExportResult.FAILURE
            self._seq += 1
            try:
                self._conn.send((self._seq, "export", snapshot))
            except (OSError, ValueError):
                logger.exception("swanlab: sink process pipe is broken")
                return ExportResult.FAILURE
            reply = self._receive(self._seq, timeout_s)
        if reply is None:
            logger.warning("swanlab: sink process did not answer within %.1f s", timeout_s)
            return ExportResult.FAILURE
        return ExportResult(reply[1])

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
                    logger.exception("swanlab: sink process pipe is broken")
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        self._process.join(timeout_s)
        if self._process.is_alive():
            logger.warning("swanlab: killing sink process %s", self._process.pid)
            self._process.kill()
            self._process.join(1.0)
        self._conn.close()


def _serve(
    conn: Connection, config: StatsLoggerConfig, experiment: Mapping[str, Any] | None
) -> None:
    """Child process: own one SwanlabSink and answer requests until shutdown or EOF."""
    from exporters.swanlab.sink import SwanlabSink

    try:
        sink = SwanlabSink(config, experiment)
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
            conn.send((seq, sink.export(snapshot).value))
    except EOFError:
        sink.shutdown()
