"""The collector's sinks from its ``sinks`` config: the shared ones every snapshot reaches
as it arrives, and the step-based ones each run gets.

Every file of a run lies in its run directory ``<fileroot>/<experiment>/<trial>``, as the
demo's embedded StatsLogger writes it: W&B in ``wandb/``, SwanLab in ``swanlog/``,
TensorBoard in ``tensorboard/``, Trackio in ``trackio/``, the kept rollout samples in
``samples.jsonl`` (``sinks.samples.jsonl``). A set ``tensorboard.path``, ``swanlab.logdir``
or ``trackio.dir`` is a root of its own: ``<root>/<experiment>/<trial>`` is a symbolic link
to that sink's directory in the run directory, so a TensorBoard server watching the root
sees every run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from grpc import StatusCode

from collector.config import ROOT, SinksConfig
from collector.refusals import Refused
from exporters import registry
from exporters.base import Sink
from exporters.local_files import link_dir
from telemetry.config import SWANLAB_DIR, TENSORBOARD_DIR, TRACKIO_DIR, StatsLoggerConfig
from telemetry.model.run import run_name

__all__ = ["RunSinkFactory", "RunSinks", "run_sink_factory", "shared_sinks"]

logger = logging.getLogger(__name__)

RunSinks = Callable[[str, str], Sequence[Sink]]
"""``(experiment, trial) -> step-based sinks`` of a run."""
SHARED_CONTEXT = registry.BuildContext(root=f"{ROOT}.sinks")
RUN_CONTEXT = dataclasses.replace(SHARED_CONTEXT, own_process=True)
"""Each run's sinks: SwanLab and Trackio in a process of their own (one SwanLab run, one
Trackio data directory per process)."""


class RunSinkFactory:
    """``(experiment, trial) -> step-based sinks`` from the collector's ``sinks`` section.

    Each enabled sink is built on its own. One that fails on a file-system error (an
    ``OSError`` anywhere in the exception's chain: an unwritable directory, a full disk)
    raises :class:`~collector.refusals.Refused` (``UNAVAILABLE``, retryable): the collector
    refuses the run's data, so the sender keeps it until the sink can start. Any other
    failure (a missing library, a SwanLab child that cannot start) is logged, left out and
    kept in :meth:`failures`; the run gets the others (retrying cannot help).
    """

    def __init__(self, sinks: SinksConfig) -> None:
        self.sinks = sinks
        self._lock = threading.Lock()
        self._failures: dict[tuple[str, str], str] = {}
        self._run_dirs: dict[str, str] = {}

    def run_config(self, experiment: str, trial: str) -> StatsLoggerConfig:
        """The StatsLogger config of one run's step-based sinks, files in its run directory."""
        config = self.sinks.logger_config(experiment, trial)
        tensorboard = config.tensorboard
        if tensorboard.path is not None:
            path = str(config.run_dir / TENSORBOARD_DIR)
            tensorboard = dataclasses.replace(tensorboard, path=path)
        return dataclasses.replace(
            config,
            tensorboard=tensorboard,
            swanlab=dataclasses.replace(config.swanlab, logdir=None),  # <run_dir>/swanlog
            trackio=dataclasses.replace(config.trackio, dir=None),  # <run_dir>/trackio
        )

    def __call__(self, experiment: str, trial: str) -> list[Sink]:
        config = self.run_config(experiment, trial)
        run = run_name(experiment, trial)
        sinks: list[Sink] = []
        failures: dict[tuple[str, str], str] = {}
        for factory in registry.enabled(config, shared=False):
            try:
                sink = factory.build(config, RUN_CONTEXT)
                sink.skip_held_steps()  # replays and retries repeat steps: never twice in the run
                sinks.append(sink)
            except Exception as exc:
                if not _file_system_error(exc):  # a missing library must not cost the others
                    failures[run, factory.name] = error = _first_line(exc)
                    logger.error("run %s: sink %s failed to start: %s", run, factory.name, error)
                    continue
                for started in sinks:
                    started.shutdown()
                with self._lock:
                    self._failures[run, factory.name] = error = _first_line(exc)
                why = f"sink {factory.name} failed to start: {error}"
                raise Refused(StatusCode.UNAVAILABLE, why, retry=True) from exc
            self._link_root(factory.name, config, experiment, trial)
        with self._lock:
            for stale in [key for key in self._failures if key[0] == run]:
                del self._failures[stale]  # an earlier try's: the sinks started since
            self._failures.update(failures)
            self._run_dirs[run] = str(config.run_dir.resolve())
        return sinks

    def _link_root(self, name: str, config: StatsLoggerConfig, experiment: str, trial: str) -> None:
        """``<root>/<experiment>/<trial>`` to the run's directory of sink ``name``."""
        roots = {
            "tensorboard": (self.sinks.tensorboard.path, TENSORBOARD_DIR),
            "swanlab": (self.sinks.swanlab.logdir, SWANLAB_DIR),
            "trackio": (self.sinks.trackio.dir, TRACKIO_DIR),
        }
        root, entry = roots.get(name, (None, ""))
        if root is None:
            return
        link, target = Path(root) / experiment / trial, config.run_dir / entry
        try:
            if link_dir(link, target):
                return
            why = "something else is there"
        except OSError as exc:
            why = str(exc)
        run = run_name(experiment, trial)
        logger.warning("run %s: %s does not lead to %s (%s)", run, link, target, why)

    def failures(self) -> dict[tuple[str, str], str]:
        """``(run, sink) -> error`` of every sink that failed to start."""
        with self._lock:
            return dict(self._failures)

    def run_dirs(self) -> dict[str, str]:
        """``run -> absolute run directory`` of every run opened so far."""
        with self._lock:
            return dict(self._run_dirs)


def _file_system_error(exc: BaseException | None) -> bool:
    """True when ``exc`` or what caused it is an ``OSError`` (that may clear)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _first_line(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, its first line."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def run_sink_factory(sinks: SinksConfig) -> RunSinkFactory:
    """The :class:`RunSinkFactory` of the collector's ``sinks`` section."""
    return RunSinkFactory(sinks)


def shared_sinks(sinks: SinksConfig) -> list[Sink]:
    """The sinks every snapshot reaches as it arrives (Prometheus, remote write), if enabled.

    Raises:
        ConfigError: the Prometheus address cannot be bound.
    """
    return registry.build_sinks(sinks, SHARED_CONTEXT, shared=True)
