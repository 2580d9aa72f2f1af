"""AReaL's SFT trainer built and run around a StatsLogger, AReaL's or rltel's.

``SFTTrainer.__init__``, ``_export_and_commit_stats`` and ``close`` of AReaL 1.0.4
(areal/trainer/sft_trainer.py) and ``WorkflowExecutor._get_dump_dir``
(areal/infra/workflow_executor.py) run unchanged, executed from the wheel by
:func:`tests.conformance.loader.method`. rltel's StatsLogger is swapped in as an AReaL user
does it: ``areal.utils.stats_logger.StatsLogger = rltel.StatsLogger`` before the trainer
reads the name (the trainer's module-level import, the executor's import inside the method).

Real AReaL code: the logging module (``setup_file_logging`` writes ``main.log`` and
``merged.log`` into ``StatsLogger.get_log_path(config.stats_logger)``), ``is_single_controller``,
the config dataclasses, ``FinetuneSpec``, the ``Evaluator`` and the perf tracer. Stand-ins
replace only what needs a model, data or a cluster: the tokenizer loader, seeding, the
allocation parser (it needs ``lark``), the actor engine (its ``export_stats`` is AReaL's own
tracker's export), the dataloader, the saver, the recover handler (recovery off) and the
process-group barrier.
"""

from __future__ import annotations

import functools
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import make_dataclass
from pathlib import Path
from typing import Any

from tests.conformance import areal_logger as al
from tests.conformance import loader

__all__ = ["run_trainer"]

TRAINER = "trainer/sft_trainer.py"
EXECUTOR = "infra/workflow_executor.py"
STEPS_PER_EPOCH = 4


class _Actor:
    """The engine the trainer builds: data-parallel rank 0 of 1, stats from a tracker."""

    data_parallel_rank, data_parallel_world_size, cpu_group = 0, 1, None

    def __init__(self, exports: Iterator[dict]) -> None:
        self._exports = exports

    def initialize(self, addr: Any, ft_spec: Any, role: str) -> None:
        """Nothing to load."""

    def export_stats(self) -> dict:
        """The next step's ``stats_tracker.export_all()``."""
        return next(self._exports)

    def destroy(self) -> None:
        """Nothing to free."""


class _Saver:
    is_async = False

    def finalize(self) -> None:
        """No checkpoint is pending."""


class _RecoverOff:
    """``RecoverHandler`` with ``recover.mode: disabled``: nothing to load."""

    def load(self, *args: Any, **kwargs: Any) -> None:
        return None


def _experiment(root: Path) -> Any:
    """AReaL's ``BaseExperimentConfig`` plus the ``actor`` field ``SFTConfig`` adds."""
    cli = al.cli_args()
    actor = make_dataclass("TrainEngineConfig", [("backend", str, "fsdp:d1")])
    sft_like = make_dataclass("SFTLike", [("actor", Any, None)], bases=(cli.BaseExperimentConfig,))
    config = sft_like(
        experiment_name=al.EXPERIMENT,
        trial_name=al.TRIAL,
        stats_logger=al.section(root),
        actor=actor(),
        tokenizer_path="unused",
        total_train_epochs=2,
    )
    config.train_dataset = cli.TrainDatasetConfig(path="unused", type="sft", batch_size=8)
    return config


@contextmanager
def _swapped(stats_logger_class: type | None) -> Iterator[types.ModuleType]:
    """``areal.utils.stats_logger`` with ``StatsLogger`` replaced (None: AReaL's), restored."""
    module = al.stats_logger_module()
    own = module.StatsLogger
    if stats_logger_class is not None:
        module.StatsLogger = stats_logger_class
    try:
        yield module
    finally:
        module.StatsLogger = own


@contextmanager
def _fresh_logging() -> Iterator[types.ModuleType]:
    """A fresh ``areal.utils.logging`` meanwhile (its ``setup_file_logging`` runs once per
    module), knowing every logger the module it replaces had made (AReaL's modules loaded
    by earlier cases log through those); afterwards its file handlers are detached from
    every logger it knows and closed, and the module it replaced is back."""
    previous = sys.modules.pop("areal.utils.logging", None)
    module = loader.module("areal.utils.logging")
    if previous is not None:  # AReaL's modules loaded before keep their loggers: in one
        module._created_loggers.update(previous._created_loggers)  # process, one registry
    try:
        yield module
    finally:
        for handler in module._file_handlers:
            for made in module._created_loggers.values():
                made.removeHandler(handler)
            handler.close()
        if previous is not None:
            sys.modules["areal.utils.logging"] = previous


def _namespace(actor: _Actor, stats_logger_class: type, logging_module: Any) -> dict[str, Any]:
    environ = loader.module("areal.utils.environ")
    platforms = loader.module("areal.infra.platforms")
    return loader.namespace_with(
        os=os,
        is_single_controller=environ.is_single_controller,
        logging=logging_module,
        load_hf_processor_and_tokenizer=lambda path: (None, None),
        seeding=types.SimpleNamespace(set_random_seed=lambda seed, key: None),
        ModelAllocation=types.SimpleNamespace(from_str=lambda text, name: text),
        RDataset=type("RDataset", (), {}),
        FinetuneSpec=al.api().FinetuneSpec,
        Evaluator=loader.module("areal.utils.evaluator").Evaluator,
        Saver=lambda config, ft_spec: _Saver(),
        RecoverHandler=lambda config, ft_spec: _RecoverOff(),
        StatsLogger=stats_logger_class,
        perf_tracer=loader.module("areal.utils.perf_tracer"),
        dist=types.SimpleNamespace(barrier=lambda group=None: None),
        current_platform=platforms.current_platform,
    )


def _trainer(namespace: dict[str, Any], actor: _Actor) -> types.SimpleNamespace:
    """An object whose methods are AReaL's, bound to it, and the construction stand-ins."""
    trainer = types.SimpleNamespace()
    for name in ("__init__", "_config_perf_tracer", "_export_and_commit_stats", "close"):
        function = loader.method(TRAINER, "SFTTrainer", name, namespace)
        setattr(trainer, name.strip("_") or name, functools.partial(function, trainer))
    trainer._config_perf_tracer = trainer.config_perf_tracer
    trainer._init_scheduler = lambda: None
    trainer._create_actor = lambda config: actor
    trainer._create_dataloader = lambda dataset, **kwargs: list(range(STEPS_PER_EPOCH))
    return trainer


def _dump_dirs(root: Path) -> list[str | None]:
    """AReaL's ``WorkflowExecutor._get_dump_dir`` (train, eval) for the same run."""
    get_dump_dir = loader.method(EXECUTOR, "WorkflowExecutor", "_get_dump_dir", {"os": os})
    engine = types.SimpleNamespace(
        experiment_name=al.EXPERIMENT, trial_name=al.TRIAL, fileroot=str(root)
    )
    executor = types.SimpleNamespace(config=engine)
    return [get_dump_dir(executor, is_eval) for is_eval in (False, True)]


def _files(root: Path) -> list[str]:
    files = [path for path in root.rglob("*") if path.is_file() and "tb" not in path.parts]
    return sorted(str(path.relative_to(root)) for path in files)


def run_trainer(stats_logger_class: type | None, exports: list[dict]) -> dict[str, Any]:
    """Build AReaL's SFT trainer with ``stats_logger_class`` swapped in (None: AReaL's own),
    commit ``exports`` through its ``_export_and_commit_stats``, close it.

    Returns what came of it, paths relative to the run's root: the log directory, the
    files under the root (TensorBoard's left out), the progress lines in AReaL's ``main.log``,
    the rollout dump directories, the TensorBoard rows and the logger's ``state_dict()``.
    """
    with al._isolated("disabled") as root, loader.kept_logging():
        with _fresh_logging() as logging_module, _swapped(stats_logger_class) as module:
            actor = _Actor(iter(exports))
            namespace = _namespace(actor, module.StatsLogger, logging_module)
            trainer = _trainer(namespace, actor)
            trainer.init(_experiment(root), train_dataset=[])
            for step in range(len(exports)):
                trainer.export_and_commit_stats(0, step, step)
            state = trainer.stats_logger.state_dict()
            log_dir = module.StatsLogger.get_log_path(trainer.config.stats_logger)
            dumps = _dump_dirs(root)
            trainer.close()
        main_log = (Path(log_dir) / "main.log").read_text().splitlines()
        return {
            "log_dir": str(Path(log_dir).relative_to(root)),
            "main_log_progress": sum(" done." in line and "Epoch " in line for line in main_log),
            "files": _files(root),
            "dump_dirs": [str(Path(d).relative_to(root)) for d in dumps],
            "tensorboard": al.tensorboard_rows(root / "tb"),
            "state": state,
        }
