"""Trackio bridge: AReaL's flat keys per step, MoE per-expert scalars kept, samples as tables.

Trackio (Hugging Face's local-first tracker) keeps each run's rows in one SQLite file per
project under its data directory. Train snapshots are logged with ``step=global_step``, as
AReaL logs them; rollout and eval snapshots at their own global step (a stepless one at
its stream's sequence number 0, 1, ...), which Trackio accepts in any order. Every key
SwanLab gets goes in, the per-expert MoE series
``moe_balance/layer_<id>/expert_<id>/{tokens,load_percent}`` included (the seed's MoE
section); ``__count`` keys never. A snapshot's kept rollout samples are one
``trackio.Table`` per stream, ``samples/<stream>``, in the same row.

Trackio fixes its data directory (``TRACKIO_DIR``) when it is first imported: a process
holds one. The sink imports it with the directory set for that import only; a process whose
Trackio already uses another directory cannot open the run here (a collector serving several
runs gives each its own process: :class:`TrackioProcessSink`).

Idempotent in the collector (:meth:`TrackioSink.skip_held_steps`): the run is resumed
(``resume="allow"``) and its rows read back with Trackio's reader; a key the run holds at
that training step or a later one is skipped (a step's samples of a stream likewise), so a
replay of the collector's durable queue never logs a step twice. Trackio's writer thread
stores what was logged every :data:`WRITE_INTERVAL_S`; :attr:`TrackioSink.settle_s` tells
the queue how long after a flush a step is on disk.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporters.base import RunSink
from exporters.child_sink import ChildSink
from exporters.local_files import writable_dir
from exporters.sample_views import sample_tables, samples_key
from exporters.steps import StreamSteps
from telemetry.config import TRACKIO_DIR, StatsLoggerConfig, public_dict
from telemetry.model.snapshot import Snapshot

__all__ = ["TrackioProcessSink", "TrackioSink", "data_dir"]

logger = logging.getLogger(__name__)

WRITE_INTERVAL_S = 0.5
"""How often Trackio's writer thread stores the logged rows (its ``BATCH_SEND_INTERVAL``)."""


def data_dir(config: StatsLoggerConfig) -> str:
    """The run's Trackio data directory: ``trackio.dir``, or ``<run_dir>/trackio``."""
    return config.trackio.dir or os.path.join(config.run_dir, TRACKIO_DIR)


class TrackioSink(RunSink):
    """Logs Snapshots to one Trackio run, named as AReaL names it.

    As in AReaL: project = ``trackio.project`` or the experiment name, run name =
    ``trackio.name`` or the trial name, ``space_id`` passed through, and the run config is
    the whole experiment config (secrets removed). Trackio's own CPU/GPU sampling stays off
    (``stats_logger.hardware`` records that).

    Args:
        config: the stats_logger configuration; ``config.trackio`` selects mode, project,
            name, Space and the data directory (:func:`data_dir`).
        experiment: the experiment config to log with the run; default: ``config``'s
            public form.

    Raises:
        ModuleNotFoundError: ``trackio`` is not installed (mode other than disabled).
        OSError: the data directory cannot be created or written.
        RuntimeError: this process's Trackio uses another data directory, or
            ``trackio.init`` failed; the message names the run and directory.
    """

    name = "trackio"
    settle_s = 4 * WRITE_INTERVAL_S
    """Seconds after a flush until what was logged is in the SQLite file."""

    def __init__(
        self, config: StatsLoggerConfig, experiment: Mapping[str, Any] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._run: Any = None
        self._closed = False
        self._steps = StreamSteps()
        self._held: dict[str, int] | None = None  # key -> highest step held; None: no skips
        section = config.trackio
        self.project = section.project or config.experiment_name
        self.run_name = section.name or config.trial_name
        self.run_dir: str | None = None
        if section.mode == "disabled":
            return
        self.run_dir = writable_dir(data_dir(config))
        trackio = _import_trackio(self.run_dir)
        try:
            self._run = trackio.init(
                project=self.project,
                name=self.run_name,
                config=dict(experiment) if experiment is not None else public_dict(config),
                space_id=section.space_id,
                resume="allow",
                embed=False,
                auto_log_gpu=False,
                auto_log_cpu=False,
            )
        except Exception as exc:
            raise RuntimeError(
                f"trackio: init of run {self.run_name!r} of project {self.project!r} in "
                f"{self.run_dir} failed: {exc}"
            ) from exc
        self._table = trackio.Table

    def _active(self) -> bool:
        return self._run is not None

    def _write(self, snapshot: Snapshot) -> None:
        data: dict[str, Any] = dict(snapshot.flat())
        for stream, (columns, rows) in sample_tables(snapshot.samples).items():
            data[samples_key(stream)] = self._table(columns=columns, data=rows)
        train_step = snapshot.step.global_step if snapshot.step is not None else None
        if self._held is not None and train_step is not None:
            data = {
                key: value for key, value in data.items() if self._held.get(key, -1) < train_step
            }
        if not data:
            return
        self._run.log(data, step=self._steps.step_of(snapshot))
        if self._held is not None and train_step is not None:
            sample_keys = {samples_key(sample.stream) for sample in snapshot.samples}
            self._held.update(
                (key, train_step)
                for key in data
                if snapshot.stream == "train" or key in sample_keys
            )

    def skip_held_steps(self) -> None:
        """From now on skip a key the run (read back with Trackio's reader) or this sink
        already holds at that step or a later one: a replay never logs a step twice."""
        with self._lock:
            self._held = {} if self._run is None else held_steps(self.project, self._run.id)

    def _finish(self) -> None:
        """Finish the run: Trackio's writer stores what is left."""
        if self._run is not None:
            self._run.finish()


def held_steps(project: str, run_id: str) -> dict[str, int]:
    """``key -> highest step`` of run ``run_id``'s rows, read with Trackio's SQLite reader;
    an unreadable project is logged (its steps may then be logged twice)."""
    from trackio import SQLiteStorage

    held: dict[str, int] = {}
    try:
        rows = SQLiteStorage.get_logs(project, run_id=run_id)
    except Exception as exc:
        logger.warning("trackio: cannot read project %s: %s", project, exc)
        return held
    for row in rows:
        step = int(row["step"])
        for key in row:
            if key not in ("step", "timestamp"):
                held[key] = max(held.get(key, step), step)
    return held


def _import_trackio(directory: str) -> Any:
    """``trackio``, imported with ``TRACKIO_DIR=directory`` (for that import only) when this
    process has not imported it yet.

    Raises:
        ModuleNotFoundError: trackio is not installed.
        RuntimeError: this process's trackio already uses another data directory.
    """
    if sys.modules.get("trackio") is None:
        saved = os.environ.get("TRACKIO_DIR")
        os.environ["TRACKIO_DIR"] = directory
        try:
            import trackio
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "the Trackio sink needs trackio: pip install rltel[trackio]", name="trackio"
            ) from exc
        finally:
            if saved is None:
                del os.environ["TRACKIO_DIR"]
            else:
                os.environ["TRACKIO_DIR"] = saved
    import trackio
    from trackio.utils import TRACKIO_DIR as fixed

    if Path(fixed).resolve() != Path(directory).resolve():
        raise RuntimeError(
            f"trackio: this process's Trackio data directory is {fixed} (fixed when trackio "
            f"was imported), not {directory}; Trackio allows one per process (use "
            "TrackioProcessSink for several)"
        )
    return trackio


class TrackioProcessSink(ChildSink):
    """Runs a :class:`TrackioSink` for one run in its own spawned process (see
    :class:`~exporters.child_sink.ChildSink` for the arguments and errors)."""

    settle_s = TrackioSink.settle_s

    def __init__(
        self,
        config: StatsLoggerConfig,
        experiment: Mapping[str, Any] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__("trackio", TrackioSink, config, experiment, start_timeout_s)
