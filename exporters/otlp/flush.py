"""Replay spools left on disk to an OTLP/gRPC endpoint, without a process that commits.

What ``rltel spool flush DIR --endpoint HOST:PORT`` and
:meth:`rltel.logger.StatsLogger.flush_spool` run: each spool's requests are sent in
order, oldest first, and each leaves the disk once the endpoint took it. A failed request
is retried with a doubling backoff (at least the endpoint's retry pushback) until the
deadline; what is left then stays on disk, in order, for a later flush or run. A request
the endpoint refuses for good is dropped, counted and logged.

Only one process may replay a spool at a time: flush a spool whose process has ended.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from exporters.base import ExportResult
from exporters.otlp.spool import Spool
from exporters.otlp.transport import THREAD_PREFIX, OtlpSender
from exporters.retry import retry
from telemetry.config import OtlpConfig, StatsLoggerConfig
from telemetry.model.errors import ConfigError

__all__ = ["FlushReport", "find_spools", "flush_run_spool", "flush_spools"]

_NO_LIMIT = 1 << 62  # the flush only reads: the spool's limit bounds appends


@dataclass(frozen=True)
class FlushReport:
    """What a flush did.

    Attributes:
        spools: the spool directories replayed.
        delivered_requests: requests the endpoint took (and the disk let go).
        delivered_points: data points in them.
        refused_points: points the endpoint refused for good, or unreadable on disk (dropped).
        left_requests: requests still on disk at the deadline.
        left_points: data points in them.
        last_error: why the last failed request failed (a gRPC status name), if one did.
    """

    spools: tuple[Path, ...]
    delivered_requests: int
    delivered_points: int
    refused_points: int
    left_requests: int
    left_points: int
    last_error: str | None

    @property
    def complete(self) -> bool:
        """Everything on disk was delivered: nothing left, nothing refused."""
        return self.left_requests == 0 and self.refused_points == 0

    def line(self, endpoint: str) -> str:
        """One line for the user: what was sent, and what is left or was refused."""
        sent = (
            f"{self.delivered_requests} requests ({self.delivered_points} points) "
            f"from {len(self.spools)} spools delivered to {endpoint}"
        )
        if self.complete:
            return sent
        problems = []
        if self.left_requests:
            why = f" ({self.last_error})" if self.last_error else ""
            problems.append(
                f"{self.left_requests} requests ({self.left_points} points) left on disk: "
                f"the endpoint did not take them before the deadline{why}; run it again"
            )
        if self.refused_points:
            problems.append(f"{self.refused_points} points refused or unreadable, dropped")
        return f"{sent}; {'; '.join(problems)}"


def find_spools(directory: str | Path) -> list[Path]:
    """``directory`` if it holds spool entries, and each subdirectory that does (a run's
    ``otlp-spool/`` holds one spool per sender: ``trainer/``, ``rollout-<worker>/``...): the
    segments of a spool's log, or the entry files of an earlier version's spool.

    Raises:
        FileNotFoundError: ``directory`` is not a directory.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"spool directory {root} does not exist")
    candidates = [root, *sorted(path for path in root.iterdir() if path.is_dir())]
    return [path for path in candidates if any(path.glob("*.seg")) or any(path.glob("*.json"))]


def flush_spools(
    directory: str | Path,
    otlp: OtlpConfig,
    *,
    timeout_s: float = 30.0,
    backoff_s: float = 0.2,
    max_backoff_s: float = 5.0,
) -> FlushReport:
    """Send every spool under ``directory`` to ``otlp.endpoint`` within ``timeout_s``.

    Args:
        directory: a spool, or a directory of spools (see :func:`find_spools`).
        otlp: the endpoint, TLS, headers and request timeout (``otlp.endpoint`` required).
        timeout_s: the deadline of the whole flush; later retries are not started.
        backoff_s: first retry delay; doubles per failure up to ``max_backoff_s``.
        max_backoff_s: the longest delay between two attempts.

    Raises:
        FileNotFoundError: ``directory`` is not a directory.
        ValueError: ``otlp.endpoint`` is not set.
    """
    if not otlp.endpoint:
        raise ValueError("otlp.endpoint is required to flush a spool")
    spools = find_spools(directory)
    deadline = time.monotonic() + timeout_s
    sender = OtlpSender(
        otlp.endpoint,
        insecure=otlp.insecure,
        tls=otlp.tls if otlp.tls is not None and otlp.tls.enabled else None,
        headers=otlp.plain_headers(),
        timeout_s=otlp.timeout,
        down_hint="retrying until the flush deadline",
    )
    replay = _Replay(sender, deadline, backoff_s, max_backoff_s)
    # The exporter's own per-attempt error log is silenced on the sink's threads; the
    # sender logs an outage once.
    worker = threading.Thread(
        target=replay.run, args=(spools,), name=f"{THREAD_PREFIX}-flush", daemon=True
    )
    try:
        worker.start()
        worker.join()
    finally:
        sender.close()
    if replay.error is not None:
        raise replay.error
    return replay.report(spools)


def flush_run_spool(
    config: StatsLoggerConfig,
    directory: str | Path | None = None,
    *,
    endpoint: str | None = None,
    timeout_s: float = 30.0,
) -> FlushReport:
    """Send the spool that a run's processes left behind (``StatsLogger.flush_spool``).

    Args:
        config: the run's ``stats_logger`` config: its ``otlp`` endpoint, TLS, headers
            and spool directory.
        directory: the spool (or ``otlp-spool/``) to send; default: the config's.
        endpoint: send there instead of ``otlp.endpoint``.
        timeout_s: the deadline; what is not delivered by then stays on disk.

    Raises:
        ConfigError: no endpoint to send to.
        FileNotFoundError: the spool directory does not exist.
    """
    from exporters.otlp import spool_root

    otlp = config.otlp
    if endpoint is not None:
        otlp = dataclasses.replace(otlp, endpoint=endpoint)
    if not otlp.endpoint:
        raise ConfigError("stats_logger.otlp.endpoint: required to flush a spool")
    return flush_spools(directory or spool_root(config), otlp, timeout_s=timeout_s)


class _Replay:
    """The flush's loop over spools, run on one thread."""

    def __init__(
        self, sender: OtlpSender, deadline: float, backoff_s: float, max_backoff_s: float
    ) -> None:
        self.sender = sender
        self.deadline = deadline
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.requests = self.points = self.refused = 0
        self.last_error: str | None = None
        self.error: BaseException | None = None
        self._left: list[Spool] = []

    def run(self, directories: Iterable[Path]) -> None:
        try:
            for directory in directories:
                spool = Spool(directory, _NO_LIMIT)
                self._drain(spool)
                self.refused += spool.dropped_points  # unreadable entries
                self._left.append(spool)
        except BaseException as exc:  # re-raised on the caller's thread
            self.error = exc

    def _drain(self, spool: Spool) -> None:
        while (batch := spool.peek()) is not None:
            if time.monotonic() >= self.deadline:
                return
            result = retry(
                lambda: self.sender.send(batch),
                lambda result: result is ExportResult.FAILURE,
                self._pause,
                backoff_s=self.backoff_s,
                max_backoff_s=self.max_backoff_s,
                pushback=lambda _: self.sender.retry_after_s,
            )
            if result is ExportResult.FAILURE:
                return  # the deadline comes before the next try: the rest stays on disk
            spool.pop()
            if result is ExportResult.SUCCESS:
                self.requests += 1
                self.points += batch.num_points
            else:
                self.refused += batch.num_points

    def _pause(self, result: ExportResult, wait_s: float) -> bool:
        """Wait ``wait_s`` before the next try, unless the deadline comes first."""
        del result
        self.last_error = self.sender.last_failure
        if time.monotonic() + wait_s >= self.deadline:
            return False
        time.sleep(wait_s)
        return True

    def report(self, spools: list[Path]) -> FlushReport:
        return FlushReport(
            spools=tuple(spools),
            delivered_requests=self.requests,
            delivered_points=self.points,
            refused_points=self.refused,
            left_requests=sum(len(spool) for spool in self._left),
            left_points=sum(spool.points for spool in self._left),
            last_error=self.last_error,
        )
