"""StatsLogger: AReaL's ``commit(epoch, epoch_step, global_step, data)`` on rltel's pipeline.

One commit becomes one :class:`~telemetry.model.snapshot.Snapshot` per step, handed to
the logger's one :class:`exporters.fanout.FanOut`, every sink behind its own bounded queue.
With ``otlp.endpoint`` set its sink list is the OTLP sink (the collector runs the other
sinks); without one (the embedded default) it is the in-process sinks the config enables.
Either way ``commit`` returns without waiting on a sink or the network. Trainers log on
rank 0 only; rollout and eval workers each log their own streams (over OTLP their scalar
streams go as running totals since the worker's start, so a lost request loses nothing).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporters.fanout import FanOut
from exporters.otlp import FACTORY as OTLP
from exporters.prometheus import FACTORY as PROMETHEUS
from rltel.commit_points import stats_points
from rltel.logger_heartbeat import start_heartbeat
from rltel.logger_sinks import STREAMS, build_context, logger_sinks, serve_sink_health, warn_no_sink
from rltel.logger_tracing import sends_spans, start_tracing, stop_tracing
from rltel.progress import progress_line
from telemetry.config import StatsLoggerConfig, load_experiment, log_path, public_dict
from telemetry.model import names
from telemetry.model.errors import ConfigError, InvalidValueError
from telemetry.model.snapshot import Gauge, Point, Snapshot, Step
from telemetry.record.stats import Stats
from telemetry.record.typed_keys import points_for
from telemetry.samples import Drained, default_buffer

if TYPE_CHECKING:
    from exporters.otlp.flush import FlushReport

__all__ = ["CLOSED_METRIC", "ROLES", "STEP_METRIC", "StatsLogger"]

logger = logging.getLogger(__name__)

ROLES = ("trainer", "rollout", "eval")
STEP_METRIC = names.STEP_METRIC
"""Gauge of the committed ``global_step`` in every trainer export: a heartbeat (stall alert)."""
CLOSED_METRIC = names.CLOSED_METRIC
"""Gauge (1) a trainer sends the collector from :meth:`StatsLogger.close`: ended, not stalled."""


class StatsLogger:
    """Logs committed stats through one fan-out: to the collector (OTLP) or in-process sinks.

    Args:
        config: ``stats_logger`` section: a :class:`StatsLoggerConfig`, a mapping (AReaL's
            YAML fields as they are) or a YAML path.
        ft_spec: AReaL's ``FinetuneSpec`` (or :class:`rltel.progress.FinetuneSpec`):
            the totals of the per-commit progress line; optional.
        role: ``trainer`` (rank 0 logs), ``rollout`` or ``eval`` (every worker logs).
        worker_id: the rollout/eval worker's id (resource attribute ``rltel.worker_id``).
        sinks: in-process sinks; default: those ``config`` enables. With an OTLP endpoint
            only explicitly given sinks run in-process, beside the OTLP sink.
        otlp_options: extra :class:`~exporters.otlp.sink.OtlpSink` arguments (backoff,
            spool timing).
        store: the ``torch.distributed`` store that carries the heartbeats (default: the
            default group's).

    Raises:
        ConfigError: an invalid config or an unknown role.
    """

    def __init__(
        self,
        config: StatsLoggerConfig | Mapping[str, Any] | str | Path | None = None,
        ft_spec: Any = None,
        *,
        role: str = "trainer",
        worker_id: str | int | None = None,
        sinks: Sequence[Any] | None = None,
        otlp_options: Mapping[str, Any] | None = None,
        store: Any = None,
    ) -> None:
        if role not in ROLES:
            raise ConfigError(f"StatsLogger role must be one of {', '.join(ROLES)}; got {role!r}")
        self.config, self.experiment_config = load_experiment(config)
        self.role = role
        self.ft_spec = ft_spec
        self._last_commit_step = -1
        self.rank = _rank()
        self.enabled = role != "trainer" or self.rank == 0
        self.start_unix_nano = time.time_ns()
        self._pid = os.getpid()  # a forked child (data-loader worker) logs nothing
        self._last_step: Step | None = None
        self._closed = False
        self.resource = self._resource(worker_id)
        default_buffer().configure(self.config.samples)
        context = build_context(
            self.config,
            self.experiment_config,
            role,
            self.resource_id,
            self.start_unix_nano,
            otlp_options,
        )
        sends = self.enabled or sends_spans(self.config)  # a trainer rank > 0: spans only
        self.fanout = FanOut(logger_sinks(self.config, sinks, context) if sends else [])
        self.otlp: Any = self.fanout.built_by(OTLP)
        self.heartbeat = start_heartbeat(
            self.config,
            role,
            self.rank,
            socket.gethostname(),
            self.fanout.built_by(PROMETHEUS),
            store,
            "" if role == "trainer" else self.resource_id,
        )
        self.hardware = _start_hardware(self.config)
        self.tracing = start_tracing(
            self.config, role, self.rank, self.resource_id, self.otlp, self.resource
        )
        if not self.enabled:
            if self.fanout.queued:  # its spans are drained at exit
                atexit.register(self.close)
            return
        serve_sink_health(self.fanout, self.config)
        if not self.fanout.queued:
            warn_no_sink(self.config)
        atexit.register(self.close)
        endpoint = self.config.otlp.endpoint
        logger.info(
            "stats logger (%s, %s): %s",
            role,
            f"otlp {endpoint}" if endpoint else "embedded",
            public_dict(self.config),
        )

    def _resource(self, worker_id: str | int | None) -> tuple[tuple[str, Any], ...]:
        resource: list[tuple[str, Any]] = [
            ("service.name", "rltel"),
            (names.EXPERIMENT, self.config.experiment_name),
            (names.TRIAL, self.config.trial_name),
            (names.ROLE, self.role),
            (names.RANK, self.rank),
        ]
        if worker_id is not None:
            resource.append((names.WORKER_ID, str(worker_id)))
        resource.append(("host.name", socket.gethostname()))
        return tuple(resource)

    @property
    def resource_id(self) -> str:
        """The worker id, or the rank when there is none."""
        for name, value in self.resource:
            if name == names.WORKER_ID:
                return str(value)
        return str(self.rank)

    @property
    def prometheus_url(self) -> str | None:
        """``http://host:port/metrics`` of the in-process Prometheus sink, with the port it
        bound (``prometheus.port: 0`` picks a free one); None when it does not run here."""
        sink: Any = self.fanout.built_by(PROMETHEUS)
        return None if sink is None else sink.url

    def commit(
        self,
        epoch: int,
        epoch_step: int,
        global_step: int,
        data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> None:
        """Log ``data`` for one step, or a list of dicts for consecutive steps.

        As in AReaL, a trainer logs the progress line (``Epoch 1/2 Step 3/8 Train step
        3/16 done.``, INFO on this module's logger) and its sinks log at
        ``max(global_step, last committed step + 1)``, so steps never go back (W&B would
        drop the rows).

        Args:
            epoch: the epoch (0-based).
            epoch_step: the step within the epoch (of the first dict in a list).
            global_step: the global step (of the first dict in a list); sinks log at it.
            data: AReaL's flat dict (``k__count`` entries become counts of ``k``), a tracker
                :class:`Stats` (typed points), or a list of either, one per step. A plain
                dict gets back the typed points of the tracker exports it was merged from
                (histograms, counters, units) wherever it still holds their values; either
                logs the values it holds at commit, as AReaL does.

        Raises:
            InvalidValueError: a value is not a number (names the key).
        """
        if self.heartbeat is not None:
            self.heartbeat.progress.advance(int(global_step))
        # this step's samples: on the committing rank with what export_all gathered from the
        # other ranks of its group (telemetry.record.gather); a rank that logs nothing drops it
        drained = default_buffer().drain()
        if not self.enabled or self._closed or os.getpid() != self._pid:
            return
        items = [data] if isinstance(data, Mapping) else list(data)
        if self.role == "trainer":
            logger.info("%s", progress_line(self.ft_spec, epoch, epoch_step, global_step))
            global_step = max(int(global_step), self._last_commit_step + 1)
            self._last_commit_step = global_step + len(items) - 1
        for offset, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidValueError(
                    f"commit data must be a dict or a list of dicts, got {type(item).__name__}"
                )
            points = stats_points(item) if isinstance(item, Stats) else points_for(item)
            step = Step(int(epoch), int(epoch_step) + offset, int(global_step) + offset)
            if self.role == "trainer":
                self._last_step = step
            last = offset == len(items) - 1
            self.fanout.export(self._snapshot(points, step, drained if last else ()))

    def _snapshot(
        self, points: tuple[Point, ...], step: Step, drained: Sequence[Drained]
    ) -> Snapshot:
        """The Snapshot of one committed step: ``points`` with the trainer's step gauge and
        the counts and samples of ``drained``."""
        if self.role == "trainer":
            points = (*points, Gauge(STEP_METRIC, float(step.global_step)))
        # a worker's counts are its process's own (rltel/..., as its sender's health): the
        # collector does not merge them into the run, where the trainer's carry the names
        own = "" if self.role == "trainer" else "rltel/"
        for window in drained:
            prefix = f"{own}samples/{window.stream}/"
            points = (
                *points,
                Gauge(prefix + "seen", float(window.seen)),
                Gauge(prefix + "kept", float(len(window.samples))),
                Gauge(prefix + "truncated", float(window.truncated)),
            )
        samples = tuple(sample for window in drained for sample in window.samples)
        return Snapshot(points, step, self.resource, time.time_ns(), STREAMS[self.role], samples)

    def _send_closed(self, step: Step) -> None:
        """Tell the collector this trainer ended (its step series stops without a stall).

        Only the OTLP sink gets it: in-process sinks see the logger go away themselves.
        """
        points = (Gauge(STEP_METRIC, float(step.global_step)), Gauge(CLOSED_METRIC, 1.0))
        snapshot = Snapshot(points, step, self.resource, time.time_ns(), STREAMS[self.role])
        for queued in self.fanout.queued:
            if queued.sink is self.otlp:
                queued.submit(snapshot)

    def state_dict(self) -> dict[str, Any]:
        """AReaL's recovery state: ``{"last_commit_step": n}`` (-1 before any commit)."""
        return {"last_commit_step": self._last_commit_step}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue after a recovered run: later commits log at steps past the saved one.

        Sinks continue the same runs: the W&B run id, SwanLab project/name and the
        TensorBoard directory depend only on the config, so a resumed process writes on.

        Raises:
            ConfigError: ``state_dict`` has no integer ``last_commit_step``.
        """
        step = state_dict.get("last_commit_step") if isinstance(state_dict, Mapping) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise ConfigError(
                f"StatsLogger.load_state_dict: expected an int last_commit_step, got {step!r}"
            )
        self._last_commit_step = step

    @staticmethod
    def get_log_path(
        config: Any = None,
        experiment_name: str | None = None,
        trial_name: str | None = None,
        fileroot: str | None = None,
    ) -> str:
        """AReaL's log directory ``<fileroot>/logs/<user>/<experiment>/<trial>``, made if
        missing: where AReaL's trainers put their own files (not rltel's run directory).
        See :func:`telemetry.config.log_path.get_log_path`; ``ValueError`` as in AReaL."""
        return log_path.get_log_path(config, experiment_name, trial_name, fileroot)

    @staticmethod
    def flush_spool(
        config: StatsLoggerConfig | Mapping[str, Any] | str | Path | None = None,
        directory: str | Path | None = None,
        *,
        endpoint: str | None = None,
        timeout_s: float = 30.0,
    ) -> FlushReport:
        """Send the OTLP spool that processes with ``config`` (as :class:`StatsLogger` takes
        it) left behind, committing nothing: ``rltel spool flush``. See
        :func:`exporters.otlp.flush.flush_run_spool` for the arguments; ``ConfigError``
        names a bad key or the missing endpoint."""
        from exporters.otlp.flush import flush_run_spool

        loaded, _ = load_experiment(config)
        return flush_run_spool(loaded, directory, endpoint=endpoint, timeout_s=timeout_s)

    def health(self) -> dict[str, Any]:
        """Each sink's queue counters (``sinks``) and, with OTLP, its sender's (``otlp``);
        nothing in a forked child (it logs nothing)."""
        if os.getpid() != self._pid:
            return {}
        out: dict[str, Any] = {"sinks": self.fanout.stats()}
        if self.otlp is not None:
            out["otlp"] = self.otlp.health()
        return out

    def close(self, timeout_s: float = 10.0) -> None:
        """Drain the sinks' queues and shut them down within ``timeout_s``; safe twice."""
        if self._closed or os.getpid() != self._pid:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self.heartbeat is not None:
            self.heartbeat.close()
        if self.hardware is not None:
            self.hardware.close()
        if self.tracing:  # its spans reach the OTLP sink's queue before the sink drains
            stop_tracing()
        if self.otlp is not None and self._last_step is not None and self.role == "trainer":
            self._send_closed(self._last_step)
        self.fanout.shutdown(timeout_s)
        if self.otlp is not None:
            from exporters.otlp import spool_root
            from exporters.otlp.overflow import close_line

            root, endpoint = spool_root(self.config), str(self.config.otlp.endpoint)
            line = close_line(self.otlp.health(), self.otlp.spool, root, endpoint)
            if line is not None:
                logger.warning("%s", line)


def _start_hardware(config: StatsLoggerConfig) -> Any:
    """This rank's :class:`~telemetry.metrics.hardware.HardwareSource`, if enabled."""
    if not config.hardware.enabled:
        return None
    from telemetry.metrics.hardware import HardwareSource

    return HardwareSource(config.hardware.phase_memory, config.hardware.nvml)


def _rank() -> int:
    """This process's rank in the default ``torch.distributed`` group; 0 when none."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return 0
