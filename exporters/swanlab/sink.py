"""SwanLab bridge: AReaL's flat keys per step, MoE per-expert scalars kept.

SwanLab keeps a separate step set per key and accepts steps in any order, so rollout and
eval snapshots are logged at their own global step (a stepless one at its stream's
sequence number 0, 1, ...). SwanLab keeps one value per (key, step): a repeat is ignored
by the library, and the sink counts it in ``duplicates``.

SwanLab holds one run per process (a module-level global). A second ``SwanlabSink`` in a
process whose run is still open raises at construction; a collector that serves several
runs gives each its own process (:class:`exporters.swanlab.SwanlabProcessSink`).

A snapshot's kept rollout samples go under ``samples/<stream>``: a list of ``swanlab.Text``
at the step, one JSON object per sample (as in ``samples.jsonl``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from exporters.base import RunSink
from exporters.local_files import writable_dir
from exporters.sample_views import sample_line, samples_key
from exporters.steps import StreamSteps
from telemetry.config import SWANLAB_DIR, StatsLoggerConfig, public_dict
from telemetry.model.run import run_name
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

MODES = {"cloud": "cloud", "online": "cloud", "local": "local", "offline": "offline"}


class SwanlabSink(RunSink):
    """Logs Snapshots to one SwanLab run ``<experiment>_<trial>``.

    Args:
        config: the stats_logger configuration; ``config.swanlab`` selects mode (cloud or
            online, local, offline, disabled; always passed explicitly, since the library
            default is cloud), project (default: the experiment name), run name, extra
            config and ``logdir`` (default ``<fileroot>/<experiment>/<trial>/swanlog``).

    Raises:
        ModuleNotFoundError: ``swanlab`` (or, for local mode, ``swanboard``) is missing.
        OSError: the log directory cannot be created or written.
        RuntimeError: another SwanLab run is open in this process, cloud mode has no API
            key, or ``swanlab.init`` failed.
    """

    name = "swanlab"

    def __init__(
        self, config: StatsLoggerConfig, experiment: Mapping[str, Any] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._swanlab: Any = None
        self._run: Any = None
        self._closed = False
        self._steps = StreamSteps()
        self.duplicates = 0
        self.logdir: str | None = None
        section = config.swanlab
        if section.mode == "disabled":
            return
        mode = MODES[section.mode]
        swanlab = _import("swanlab", "pip install rltel[swanlab]")
        if mode == "local":
            _import("swanboard", "pip install 'swanlab[dashboard]' (SwanLab local mode)")
        if swanlab.get_run() is not None:
            raise RuntimeError(
                "swanlab: another run is open in this process; SwanLab allows one run per "
                "process (use SwanlabProcessSink for several runs)"
            )
        if mode == "cloud":
            _cloud_login(swanlab, section.api_key.get_secret_value() if section.api_key else None)
        self.logdir = writable_dir(section.logdir or os.path.join(config.run_dir, SWANLAB_DIR))
        run_config = dict(experiment) if experiment is not None else public_dict(config)
        if section.config:
            run_config.update(section.config)
        try:
            self._run = swanlab.init(
                project=section.project or config.experiment_name,
                experiment_name=section.name or run_name(config.experiment_name, config.trial_name),
                config=run_config,
                logdir=self.logdir,
                mode=mode,
            )
        except Exception as exc:
            raise RuntimeError(f"swanlab: init in {self.logdir} ({mode}) failed: {exc}") from exc
        self._swanlab = swanlab

    @property
    def run_dir(self) -> str | None:
        """The run's local directory (``backup.swanlab``, ``files/``), or None."""
        return None if self._run is None else self._run.public.run_dir

    def _active(self) -> bool:
        return self._run is not None

    def _write(self, snapshot: Snapshot) -> None:
        data: dict[str, Any] = dict(snapshot.flat())
        global_step = snapshot.step.global_step if snapshot.step is not None else None
        for sample in snapshot.samples:  # a text per sample, one key per stream
            line = json.dumps(sample_line(global_step, sample), ensure_ascii=False)
            data.setdefault(samples_key(sample.stream), []).append(self._swanlab.Text(line))
        if not data:
            return
        step = self._steps.step_of(snapshot)
        infos = self._run.log(data, step=step)
        repeated = [key for key, info in (infos or {}).items() if getattr(info, "is_error", False)]
        if repeated:
            self.duplicates += len(repeated)
            logger.warning(
                "swanlab: %s step %d repeats %s already logged at this step (%s); SwanLab keeps "
                "the first value of a key per step, so the repeated values are not written",
                snapshot.stream,
                step,
                f"{len(repeated)} key" + ("s" if len(repeated) > 1 else ""),
                ", ".join(repeated[:3]) + (", ..." if len(repeated) > 3 else ""),
            )

    def _finish(self) -> None:
        """Finish the run so its files are complete (and the process may open another)."""
        if self._run is not None:
            self._swanlab.finish()


def _import(module: str, hint: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"the SwanLab sink needs {module}: {hint}", name=module) from exc


def _cloud_login(swanlab: Any, api_key: str | None) -> None:
    """Log in with ``api_key``, or check that a saved key exists so init cannot prompt."""
    if api_key:
        swanlab.login(api_key=api_key)
        return
    from swanlab.package import get_key

    try:
        get_key()
    except Exception as exc:
        raise RuntimeError(
            "swanlab: cloud mode needs an API key: set stats_logger.swanlab.api_key or "
            "SWANLAB_API_KEY, or run `swanlab login`"
        ) from exc
