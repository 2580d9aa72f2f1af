"""AReaL's own ``StatsLogger`` (``areal/utils/stats_logger.py``) run in the test process,
and rltel's ``StatsLogger`` run on the same calls, each reporting what it wrote.

AReaL's file is executed unchanged (:func:`tests.conformance.loader.module`). What it imports
is real except:

- ``areal.api`` / ``areal.api.cli_args``: stand-in modules holding AReaL's own definitions
  (``FinetuneSpec`` from ``api/io_struct.py``; the config dataclasses down to
  ``BaseExperimentConfig`` from ``api/cli_args.py``), registered with
  ``sys.modules.setdefault`` and filled only with the names they lack, so the modules of
  ``tests/conformance/areal_api.py`` are shared, never replaced;
- ``trackio`` where it is not installed: a module whose calls fail the test, as AReaL calls
  it only when ``stats_logger.trackio.mode`` is not ``disabled`` (installed, it is the real
  one: ``tests/conformance/cases_trackio.py`` runs both loggers with it on).

W&B runs offline (or disabled), SwanLab disabled, TensorBoard on, in a temporary directory.
AReaL's ``areal.utils.logging.getLogger`` replaces ``logging.Logger.root`` and
``Logger.manager`` on every call; every AReaL import here is wrapped so the test process
keeps its own logging tree.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import glob
import logging
import os
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tests.conformance import loader

__all__ = [
    "CONFIG_NAMES",
    "Commit",
    "api",
    "areal_tracker",
    "cli_args",
    "experiment",
    "finetune_spec",
    "method",
    "run_areal",
    "run_rltel",
    "section",
    "stats_logger_module",
    "tensorboard_rows",
    "wandb_rows",
    "wandb_run",
    "without",
]

CONFIG_NAMES = (
    "WandBConfig",
    "SwanlabConfig",
    "TensorBoardConfig",
    "TrackioConfig",
    "StatsLoggerConfig",
    "NameResolveConfig",
    "ClusterSpecConfig",
    "SchedulingStrategyType",
    "SchedulingStrategy",
    "SchedulingSpec",
    "_DatasetConfig",
    "TrainDatasetConfig",
    "ValidDatasetConfig",
    "_Timer",
    "EvaluatorConfig",
    "SaverConfig",
    "RecoverConfig",
    "SessionTracerConfig",
    "MemoryProfilerConfig",
    "PerfTracerConfig",
    "SGLangConfig",
    "vLLMConfig",
    "SchedulerConfig",
    "BaseExperimentConfig",
)
"""AReaL's definitions in ``areal.api.cli_args``: ``BaseExperimentConfig`` and what it holds."""

EXPERIMENT, TRIAL = "exp", "trial"

Commit = tuple[int, int, int, Any]
"""``commit(epoch, epoch_step, global_step, data)`` arguments."""


def _module(name: str, folder: str | None = None) -> types.ModuleType:
    """The module ``name`` in ``sys.modules``, created (a package over AReaL's ``folder``)
    only when absent."""
    module = types.ModuleType(name)
    if folder is not None:
        module.__path__ = [str(loader.root() / folder)]
    return sys.modules.setdefault(name, module)


def _add_definitions(module: types.ModuleType, relative: str, names: Sequence[str]) -> None:
    """Execute in ``module`` AReaL's ``names`` of ``relative`` that it lacks (an existing
    name is kept); the helpers they refer to are added where absent."""
    missing = [name for name in names if name not in vars(module)]
    if not missing:
        return
    from omegaconf import MISSING

    helpers = loader.namespace_with(
        MISSING=MISSING, os=os, Enum=enum.Enum, Any=Any, ClassVar=typing.ClassVar
    )
    for name, value in helpers.items():
        vars(module).setdefault(name, value)
    loader.definitions(relative, missing, vars(module))


@cache
def api() -> types.ModuleType:
    """``areal.api`` holding AReaL's ``FinetuneSpec`` (its ``__init__`` is not run)."""
    with loader.kept_logging():
        loader.module("areal.utils.logging")  # registers ``areal`` and ``areal.utils``
    module = _module("areal.api", "api")
    _add_definitions(module, "api/io_struct.py", ["FinetuneSpec"])
    return module


@cache
def cli_args() -> types.ModuleType:
    """``areal.api.cli_args`` holding AReaL's config dataclasses (:data:`CONFIG_NAMES`)."""
    api()
    module = _module("areal.api.cli_args")
    _add_definitions(module, "api/cli_args.py", CONFIG_NAMES)
    return module


def _trackio() -> None:
    """A ``trackio`` whose every call fails: AReaL must not call it with trackio disabled."""
    if "trackio" in sys.modules or _importable("trackio"):
        return
    stand_in = types.ModuleType("trackio")

    def called(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("AReaL called trackio with stats_logger.trackio.mode disabled")

    stand_in.init = stand_in.log = stand_in.finish = called
    sys.modules["trackio"] = stand_in


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@cache
def stats_logger_module() -> types.ModuleType:
    """AReaL's ``areal.utils.stats_logger``, executed from its file."""
    cli_args()
    _trackio()
    with loader.kept_logging():
        loader.module("areal.version")
        loader.module("areal.utils.printing")
        return loader.module("areal.utils.stats_logger")


def areal_tracker() -> types.ModuleType:
    """A fresh AReaL ``stats_tracker`` module (empty trackers)."""
    with loader.kept_logging():
        return loader.stats_tracker()


def finetune_spec(epochs: int = 2, dataset_size: int = 64, batch_size: int = 8) -> Any:
    """AReaL's ``FinetuneSpec`` (8 steps per epoch by default)."""
    return api().FinetuneSpec(epochs, dataset_size, batch_size)


def section(root: Path, wandb_mode: str = "disabled") -> Any:
    """AReaL's ``StatsLoggerConfig``: files under ``root``, TensorBoard at ``root/tb``."""
    cli = cli_args()
    return cli.StatsLoggerConfig(
        experiment_name=EXPERIMENT,
        trial_name=TRIAL,
        fileroot=str(root),
        wandb=cli.WandBConfig(mode=wandb_mode),
        tensorboard=cli.TensorBoardConfig(path=str(root / "tb")),
    )


def experiment(root: Path, wandb_mode: str = "disabled") -> Any:
    """AReaL's ``BaseExperimentConfig`` holding :func:`section` (what AReaL's logger takes)."""
    return cli_args().BaseExperimentConfig(
        experiment_name=EXPERIMENT, trial_name=TRIAL, stats_logger=section(root, wandb_mode)
    )


@contextlib.contextmanager
def _isolated(wandb_mode: str) -> Iterator[Path]:
    """A temporary root; the environment restored after; W&B's process-wide settings
    offline meanwhile when ``wandb_mode`` is (as ``WANDB_MODE=offline`` sets them).

    AReaL calls ``wandb.login()`` for every mode but ``disabled``; without a terminal and
    without offline settings it fails for want of an API key, so both loggers run in the
    same offline W&B process settings.
    """
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if wandb_mode == "offline":
                import wandb

                wandb.setup(wandb.Settings(mode="offline", silent=True))
            yield Path(tmp)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            if wandb_mode == "offline":
                import wandb

                wandb.teardown()  # stops this process's W&B service, whoever started it:
                os.environ.pop("WANDB_SERVICE", None)  # children must not look for it


@contextlib.contextmanager
def _progress_lines(target: logging.Logger) -> Iterator[list[str]]:
    """The ``Epoch ...`` lines ``target`` logs at INFO meanwhile."""
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Epoch "):
                lines.append(message)

    handler, level = Lines(logging.INFO), target.level
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        target.removeHandler(handler)
        target.setLevel(level)


def tensorboard_rows(path: Path) -> list[tuple[str, int, float]]:
    """Every scalar under ``path`` as ``(tag, step, value)``, read by TensorBoard's reader."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    accumulator = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
    accumulator.Reload()
    return sorted(
        (tag, event.step, float(event.value))
        for tag in accumulator.Tags()["scalars"]
        for event in accumulator.Scalars(tag)
    )


def _wandb_records(root: Path) -> list[dict[str, Any]]:
    """The records of the one offline W&B run under ``root``, decoded by W&B's CLI."""
    from tests.wandb_log import inspect_wandb

    (path,) = glob.glob(str(root / "**" / "offline-run-*" / "*.wandb"), recursive=True)
    return inspect_wandb(path)


def wandb_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history rows of a W&B run's records (``_runtime``/``_timestamp`` removed)."""
    hidden = ("_runtime", "_timestamp")
    return [
        {key: value for key, value in record["history"]["item"].items() if key not in hidden}
        for record in records
        if record["type"] == "history"
    ]


def wandb_run(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a W&B run went (id, project, group, name) and the keys of its run config:
    top level, and the ``stats_logger`` section's with one level below."""
    (run,) = [record["run"] for record in records if record["type"] == "run"]
    config = {key: value for key, value in run["config"]["update"].items() if key != "_wandb"}
    section = config["stats_logger"]
    return {
        "run_id": run["run_id"],
        "project": run["project"],
        "group": run["run_group"],
        "name": run["display_name"],
        "config": sorted(config),
        "stats_logger": sorted(
            [key, sorted(value) if isinstance(value, dict) else None]
            for key, value in section.items()
        ),
    }


def _written(root: Path, lines: list[str], state: dict, wandb_mode: str) -> dict[str, Any]:
    written: dict[str, Any] = {
        "tensorboard": tensorboard_rows(root / "tb"),
        "lines": lines,
        "state": state,
    }
    if wandb_mode == "offline":
        records = _wandb_records(root)
        written["wandb"] = wandb_rows(records)
        written["wandb_run"] = wandb_run(records)
    return written


Drive = Sequence[Commit] | Callable[[Any], None]
"""The commits to make, or a function making them on the logger it is given."""


def _drive(stats_logger: Any, drive: Drive) -> None:
    if callable(drive):
        drive(stats_logger)
        return
    for commit in drive:
        stats_logger.commit(*commit)


def _run(make: Callable[[Path], Any], log: logging.Logger, drive: Drive, wandb_mode: str):
    with _isolated(wandb_mode) as root:
        with _progress_lines(log) as lines:
            stats_logger = make(root)
            _drive(stats_logger, drive)
            state = stats_logger.state_dict()
            stats_logger.close()
        return _written(root, lines, state, wandb_mode)


def run_areal(
    drive: Drive,
    *,
    wandb_mode: str = "disabled",
    config: Callable[[Path, str], Any] = experiment,
) -> dict[str, Any]:
    """AReaL's ``StatsLogger(config(root, wandb_mode), FinetuneSpec(2, 64, 8))`` driven,
    then closed (the whole experiment of :func:`experiment` by default).

    Returns what it wrote: ``tensorboard`` rows, progress ``lines``, the final ``state``
    (``state_dict()``) and, with W&B offline, the ``wandb`` rows and ``wandb_run``.
    """
    module = stats_logger_module()

    def make(root: Path) -> Any:
        return module.StatsLogger(config(root, wandb_mode), finetune_spec())

    return _run(make, module.logger, drive, wandb_mode)


def run_rltel(
    drive: Drive,
    *,
    wandb_mode: str = "disabled",
    config: Callable[[Path, str], Any] = experiment,
) -> dict[str, Any]:
    """rltel's ``StatsLogger`` driven as in :func:`run_areal`, given AReaL's own config
    objects (``config(root, wandb_mode)``: the whole experiment by default) and AReaL's
    ``FinetuneSpec``."""
    from rltel import logger as rltel_logger

    def make(root: Path) -> Any:
        return rltel_logger.StatsLogger(config(root, wandb_mode), finetune_spec())

    return _run(make, rltel_logger.logger, drive, wandb_mode)


def method(relative: str, cls: str, name: str, namespace: dict[str, Any]) -> Callable:
    """AReaL's method ``cls.name`` of file ``relative``, executed unchanged as a plain
    function (``self`` is its first argument) in ``namespace``."""
    tree = ast.parse(loader.root().joinpath(relative).read_text(), filename=relative)
    (found,) = [
        node
        for klass in tree.body
        if isinstance(klass, ast.ClassDef) and klass.name == cls
        for node in klass.body
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    found.decorator_list = []
    code = compile(ast.Module(body=[found], type_ignores=[]), str(loader.root() / relative), "exec")
    exec(code, namespace)
    return namespace[name]


def without(rows: list[tuple[str, int, float]], *tags: str) -> list[tuple[str, int, float]]:
    """``rows`` less those of ``tags``."""
    return [row for row in rows if row[0] not in tags]
