"""AReaL's log directory, ``<fileroot>/logs/<user>/<experiment>/<trial>``.

AReaL's trainers, CLI and workflow executor put AReaL's own files there (the controller's
``main.log``, the saved ``config.yaml``, rollout dumps under ``rollout/``, memory
snapshots) through ``StatsLogger.get_log_path``; AReaL's ``perf_tracer`` writes its trace
files under it too. rltel's sinks keep their files in the run directory
(``StatsLoggerConfig.run_dir``, docs/architecture.md#run-files), which is another folder.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["areal_log_dir", "get_log_path"]


def areal_log_dir(fileroot: Any, experiment: Any, trial: Any) -> str:
    """``<fileroot>/logs/<user>/<experiment>/<trial>`` joined as AReaL joins it (the user
    as ``getpass`` names it)."""
    return f"{fileroot}/logs/{getpass.getuser()}/{experiment}/{trial}"


def _field(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def get_log_path(
    config: Any = None,
    experiment_name: str | None = None,
    trial_name: str | None = None,
    fileroot: str | None = None,
) -> str:
    """AReaL's ``StatsLogger.get_log_path``: the log directory, made if missing.

    Args:
        config: a ``stats_logger`` section (AReaL's or rltel's dataclass, or a mapping);
            when given, its ``experiment_name``, ``trial_name`` and ``fileroot`` are used
            and the other arguments ignored, as in AReaL.
        experiment_name: the experiment, when no ``config`` is given.
        trial_name: the trial, when no ``config`` is given.
        fileroot: the file root, when no ``config`` is given.

    Returns:
        The path as AReaL writes it (no ``~`` or ``$VAR`` expansion).

    Raises:
        ValueError: one of the three is missing or empty (AReaL's message).
    """
    if config is not None:
        experiment_name = _field(config, "experiment_name")
        trial_name = _field(config, "trial_name")
        fileroot = _field(config, "fileroot")
    if not fileroot or not experiment_name or not trial_name:
        raise ValueError("fileroot, experiment_name, and trial_name must be provided.")
    path = areal_log_dir(fileroot, experiment_name, trial_name)
    os.makedirs(path, exist_ok=True)
    return path
