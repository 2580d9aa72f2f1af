"""Weights & Biases bridge: AReaL's flat keys per step, MoE expert loads as one table per step.

W&B keeps one history row per ``_step`` and silently drops a row whose step is lower than
the last one. Train snapshots are logged with ``step=global_step`` (so ``_step`` equals the
global step, as in AReaL). Every key is also bound with ``define_metric`` to a hidden step
metric of its stream (``global_step`` for train, ``<stream>/step`` for rollout and eval),
which is logged in the same row and is the chart's x-axis. A rollout or eval snapshot
(possibly with no step, or an older one) is placed in the first row W&B still accepts; a
row that already holds one of its keys is closed first, so no value is overwritten or
dropped, whatever order the streams arrive in.

Idempotent in the collector (:meth:`WandbSink.skip_held_steps`): a run resumed in offline
mode (a collector restarted after a crash) reads back what its earlier offline parts hold
(:mod:`exporters.wandb.earlier_steps`) and skips a key at a training step the run holds (a rollout
or eval step likewise, and a step of samples this sink logged itself too), so a replay of
the collector's durable queue never logs a step twice. W&B's writer flushes the ``.wandb``
file every :data:`FLUSH_INTERVAL_S`; the sink's :attr:`~WandbSink.settle_s` tells the queue how long
after a flush a step is on disk.

W&B truncates a table longer than ``wandb.Table.MAX_ROWS`` (10,000); a larger model's
expert loads are split into ``moe_balance/expert_loads``, ``..._part1``, ... of whole layers.
A snapshot's kept rollout samples are one table per stream, ``samples/<stream>``, in the
same row (at most ``reservoir + 2 * extremes`` rows each).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from exporters.base import RunSink
from exporters.local_files import writable_dir
from exporters.moe_tables import TABLE_COLUMNS, expert_loads, flat_without_experts
from exporters.sample_views import sample_tables, samples_key
from exporters.steps import StreamSteps
from exporters.wandb.earlier_steps import TRAIN_AXIS, EarlierSteps, held_steps
from telemetry.config import StatsLoggerConfig, public_dict
from telemetry.model.names import CLOSED_METRIC
from telemetry.model.run import run_name
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

TABLE_KEY = "moe_balance/expert_loads"
TRAIN_STEP_METRIC = TRAIN_AXIS
FLUSH_INTERVAL_S = 1.0
"""W&B's transaction-log flush interval (its default, 15 s, lost 15 s of steps to a crash)."""


def step_metric(stream: str) -> str:
    """The hidden x-axis metric of a stream: ``global_step`` for train, ``<stream>/step``."""
    return TRAIN_STEP_METRIC if stream == "train" else f"{stream}/step"


def run_id(config: StatsLoggerConfig) -> str:
    """AReaL's W&B run id ``<experiment>_<trial>_<id_suffix>``; ``timestamp`` is expanded."""
    suffix = config.wandb.id_suffix
    if suffix == "timestamp":
        suffix = time.strftime("%Y_%m_%d_%H_%M_%S")
    name = run_name(config.experiment_name, config.trial_name)
    return f"{name}_{suffix}" if suffix else name


class WandbSink(RunSink):
    """Logs Snapshots to one W&B run ``<experiment>_<trial>_<id_suffix>``, as AReaL names it.

    As in AReaL: project = ``wandb.project`` or the experiment name, run name =
    ``wandb.name`` or the trial name, group = ``wandb.group`` or ``<experiment>_<trial>``,
    and the run config is the whole experiment config (secrets removed).

    Args:
        config: the stats_logger configuration; ``config.wandb`` selects mode, project,
            entity, name, group, tags, notes and job type. Files go under
            ``<fileroot>/<experiment>/<trial>``.
        experiment: the experiment config to log with the run; default: ``config``'s
            public form.

    Raises:
        ModuleNotFoundError: ``wandb`` is not installed (mode other than disabled).
        OSError: the run directory cannot be created or written.
        RuntimeError: ``wandb.init`` failed; the message names the run and directory.
    """

    name = "wandb"
    settle_s = 2 * FLUSH_INTERVAL_S
    """Seconds after a flush until what was logged is in the ``.wandb`` file."""

    def __init__(
        self, config: StatsLoggerConfig, experiment: Mapping[str, Any] | None = None
    ) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._run: Any = None
        self._table_type: Any = None
        self._next_row = 0  # the lowest row W&B still accepts
        self._open_keys: set[str] = set()  # keys already logged into row ``_next_row``
        self._steps = StreamSteps()
        self._bound: dict[str, str] = {}  # key -> step metric it is plotted against
        self._misbound: set[str] = set()
        self._closed = False
        self._held: EarlierSteps | None = None  # what the run holds; None: no skips
        self._flush_failures = 0
        section = config.wandb
        self.run_id = run_id(config)
        if section.mode == "disabled":
            return
        try:
            import wandb
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "the W&B sink needs wandb: pip install rltel[wandb]", name="wandb"
            ) from exc
        run_dir = writable_dir(config.run_dir)
        settings: dict[str, Any] = {
            "silent": True,
            "x_transaction_log_flush_interval": FLUSH_INTERVAL_S,
        }
        if section.wandb_base_url:
            settings["base_url"] = section.wandb_base_url
        if section.wandb_api_key:
            settings["api_key"] = section.wandb_api_key.get_secret_value()
        try:
            self._run = wandb.init(
                mode=section.mode,
                project=section.project or config.experiment_name,
                entity=section.entity,
                name=section.name or config.trial_name,
                group=section.group or run_name(config.experiment_name, config.trial_name),
                job_type=section.job_type,
                notes=section.notes,
                tags=list(section.tags) if section.tags else None,
                id=self.run_id,
                dir=str(run_dir),
                config=dict(experiment) if experiment is not None else public_dict(config),
                resume="allow",
                reinit="create_new",
                settings=wandb.Settings(**settings),
            )
        except Exception as exc:
            raise RuntimeError(
                f"wandb: init of run {self.run_id!r} in {run_dir} failed: {exc}"
            ) from exc
        self._table_type = wandb.Table

    @property
    def run_dir(self) -> str | None:
        """The run's local directory (where ``run-<id>.wandb`` lives), or None when disabled."""
        return None if self._run is None else os.path.dirname(self._run.dir)

    def _active(self) -> bool:
        return self._run is not None

    def _write(self, snapshot: Snapshot) -> None:
        stream = snapshot.stream
        axis = step_metric(stream)
        if self._holds(snapshot):
            return  # an earlier part of the run holds this step (a replay after a restart)
        data: dict[str, Any] = dict(flat_without_experts(snapshot))
        if CLOSED_METRIC in data:
            # The trainer's closed marker comes at its last step, a row W&B has committed,
            # with its OTLP sink's own health: a new row would leave _step behind
            # global_step; the run's finish marks its end instead.
            return
        for part, rows in enumerate(_chunks(expert_loads(snapshot), self._table_type.MAX_ROWS)):
            key = TABLE_KEY if part == 0 else f"{TABLE_KEY}_part{part}"
            data[key] = self._table_type(columns=list(TABLE_COLUMNS), data=rows)
        for stream_name, (columns, rows) in sample_tables(snapshot.samples).items():
            data[samples_key(stream_name)] = self._table_type(columns=columns, data=rows)
        train_step = snapshot.step.global_step if snapshot.step is not None else None
        held_keys = self._held.train_keys if self._held is not None else None
        if held_keys is not None and stream == "train" and train_step is not None:
            held = held_keys  # keys the run holds at this step go
            data = {key: value for key, value in data.items() if held.get(key, -1) < train_step}
        if not data:
            return
        data[axis] = self._steps.step_of(snapshot)
        self._bind(axis, data)
        row = self._next_row
        if stream == "train" and snapshot.step is not None:
            row = max(row, snapshot.step.global_step)
        if row == self._next_row and self._open_keys.intersection(data):
            row += 1
        if row != self._next_row:
            self._open_keys = set()
        if stream == "train":
            self._run.log(data, step=row, commit=True)
            self._next_row, self._open_keys = row + 1, set()
            if held_keys is not None and train_step is not None:
                held_keys.update(dict.fromkeys(data, train_step))
        else:
            self._run.log(data, step=row, commit=False)
            self._next_row = row
            self._open_keys.update(data)
            if self._held is not None and snapshot.samples and train_step is not None:
                held_axis = self._held.axes.get(axis, train_step)  # a step's samples: once
                self._held.axes[axis] = max(held_axis, train_step)

    def _holds(self, snapshot: Snapshot) -> bool:
        """An earlier part of the run holds ``snapshot``'s rollout/eval step."""
        if self._held is None or snapshot.stream == "train" or snapshot.step is None:
            return False
        held = self._held.axes.get(step_metric(snapshot.stream))
        return held is not None and snapshot.step.global_step <= held

    def _bind(self, axis: str, data: dict[str, Any]) -> None:
        if axis not in self._bound:
            self._run.define_metric(axis, hidden=True)
            self._bound[axis] = axis
        for key in data:
            if key not in self._bound:
                self._run.define_metric(key, step_metric=axis)
                self._bound[key] = axis
            elif self._bound[key] != axis and key not in self._misbound:
                self._misbound.add(key)
                logger.warning(
                    "wandb: key %r of stream %r stays plotted against %r",
                    key,
                    axis,
                    self._bound[key],
                )

    def skip_held_steps(self) -> None:
        """From now on skip what the run holds: in offline mode, what its earlier offline
        parts logged (read back with W&B's reader), and what this sink logged."""
        with self._lock:
            held = EarlierSteps()
            if self._run is not None and self._config.wandb.mode == "offline":
                this_part = os.path.dirname(self._run.dir)
                wandb_dir = os.path.dirname(this_part)
                held = held_steps(wandb_dir, self.run_id, exclude=this_part)
                self._next_row = max(self._next_row, int(held.axes.get("_step", -1)) + 1)
            self._held = held

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until W&B's service has handled everything logged so far (its writer then
        flushes it within :data:`FLUSH_INTERVAL_S`); False when it did not answer in time."""
        with self._lock:
            if self._run is None or self._closed:
                return True
            interface = getattr(self._run, "_interface", None)
        if interface is None:
            return True
        try:
            interface.deliver_history_step().wait_or(timeout=timeout_s)
        except Exception as exc:  # W&B's service gone or slow: the journal keeps the steps
            self._flush_failures += 1
            if self._flush_failures == 1:
                logger.warning(
                    "wandb: flush of run %s failed: %s (repeats counted)", self.run_id, exc
                )
            return False
        if self._flush_failures:
            logger.info(
                "wandb: run %s flushed after %d failures", self.run_id, self._flush_failures
            )
            self._flush_failures = 0
        return True

    def _finish(self) -> None:
        """Finish the run so its files are complete."""
        if self._run is not None:
            self._run.finish()


def _chunks(loads: list[list[float | int]], max_rows: int) -> list[list[list[float | int]]]:
    """Table rows (:func:`~exporters.moe_tables.expert_loads`, the layer first) split into
    parts of at most ``max_rows`` (W&B truncates longer tables), each part holding whole
    layers unless one layer alone is longer."""
    parts: list[list[list[float | int]]] = []
    layer_rows: dict[float | int, list[list[float | int]]] = {}
    for row in loads:
        layer_rows.setdefault(row[0], []).append(row)
    current: list[list[float | int]] = []
    for rows in layer_rows.values():
        if current and len(current) + len(rows) > max_rows:
            parts.append(current)
            current = []
        current.extend(rows)
        while len(current) > max_rows:
            parts.append(current[:max_rows])
            current = current[max_rows:]
    if current:
        parts.append(current)
    return parts
