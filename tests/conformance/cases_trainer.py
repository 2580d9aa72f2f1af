"""AReaL's trainers around a StatsLogger: AReaL's SFT trainer built, committing and closed
with AReaL's own StatsLogger and with rltel's swapped in
(:mod:`tests.conformance.areal_trainer`), and ``StatsLogger.get_log_path`` called as AReaL's
trainers, CLI and workflow executor call it.

rltel's heartbeat ``rltel/step`` is left out of the TensorBoard rows (``logger_added_keys``
shows it).
"""

from __future__ import annotations

import getpass
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from tests.conformance import areal_logger as al
from tests.conformance import areal_trainer
from tests.conformance.cases import Case
from tests.conformance.cases_logger import STEP_TAG, areal_exports


@cache
def trainer_run(side: str) -> dict[str, Any]:
    """AReaL's SFT trainer with ``side``'s StatsLogger, three steps committed (run once)."""
    from rltel.logger import StatsLogger

    stats_logger = None if side == "areal" else StatsLogger
    return areal_trainer.run_trainer(stats_logger, list(areal_exports()))


def construction(side: str) -> dict[str, Any]:
    run = trainer_run(side)
    return {key: run[key] for key in ("log_dir", "files", "dump_dirs", "state")}


def commits(side: str) -> list[tuple[str, int, float]]:
    return al.without(trainer_run(side)["tensorboard"], STEP_TAG)


def get_log_path(side: str, *args: Any, **kwargs: Any) -> Any:
    """``StatsLogger.get_log_path(...)`` with ``fileroot`` ``<tmp>/root``: the path below
    ``<tmp>`` and whether it exists, or the error."""
    from rltel.logger import StatsLogger

    cls = al.stats_logger_module().StatsLogger if side == "areal" else StatsLogger
    with tempfile.TemporaryDirectory() as tmp:
        root = f"{tmp}/root"
        args = tuple(root if a == "<root>" else a for a in args)
        kwargs = {k: root if v == "<root>" else v for k, v in kwargs.items()}
        if args and args[0] == "<section>":
            args = (al.section(Path(root)), *args[1:])
        try:
            path = cls.get_log_path(*args, **kwargs)
        except ValueError as exc:
            return f"ValueError: {exc}"
        return [str(Path(path).relative_to(tmp)), Path(path).is_dir()]


USER = getpass.getuser()
CASES: list[Case] = [
    Case(
        name="trainer_sft_construction",
        call="SFTTrainer(config, train_dataset) with StatsLogger swapped; "
        "_export_and_commit_stats x3; WorkflowExecutor._get_dump_dir; close()",
        areal=lambda: construction("areal"),
        rltel=lambda: construction("rltel"),
    ),
    Case(
        name="trainer_sft_commits",
        call="SFTTrainer._export_and_commit_stats(0, s, s) for s in range(3): TensorBoard rows",
        areal=lambda: commits("areal"),
        rltel=lambda: commits("rltel"),
    ),
    Case(
        name="trainer_sft_main_log",
        call="SFTTrainer(...) in the single-controller mode: the progress lines in "
        "<get_log_path>/main.log after 3 commits",
        areal=lambda: trainer_run("areal")["main_log_progress"],
        rltel=lambda: trainer_run("rltel")["main_log_progress"],
        why="AReaL's setup_file_logging writes main.log from the loggers AReaL's own "
        "getLogger made; rltel's progress line is on the standard logger rltel.logger (the "
        "console and any handler the application adds), not in AReaL's main.log",
        expected=(3, 0),
    ),
    Case(
        name="get_log_path_section",
        call="StatsLogger.get_log_path(config.stats_logger)",
        areal=lambda: get_log_path("areal", "<section>"),
        rltel=lambda: get_log_path("rltel", "<section>"),
    ),
    Case(
        name="get_log_path_keywords",
        call="StatsLogger.get_log_path(experiment_name=e, trial_name=t, fileroot=r)",
        areal=lambda: get_log_path("areal", experiment_name="e", trial_name="t", fileroot="<root>"),
        rltel=lambda: get_log_path("rltel", experiment_name="e", trial_name="t", fileroot="<root>"),
    ),
    Case(
        name="get_log_path_missing",
        call="StatsLogger.get_log_path(experiment_name=e, trial_name=None, fileroot=r)",
        areal=lambda: get_log_path("areal", experiment_name="e", fileroot="<root>"),
        rltel=lambda: get_log_path("rltel", experiment_name="e", fileroot="<root>"),
    ),
]
