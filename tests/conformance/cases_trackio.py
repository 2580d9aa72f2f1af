"""Trackio cases: AReaL's own StatsLogger and rltel's, each given AReaL's config with
``stats_logger.trackio.mode: local`` and the same commits, each in a fresh interpreter
(Trackio fixes its data directory, ``TRACKIO_DIR``, when it is imported), their runs read
back with Trackio's own reader (``SQLiteStorage``).

AReaL's Trackio writes where ``TRACKIO_DIR`` says; rltel's writes ``stats_logger.trackio.dir``
(default ``<run_dir>/trackio``), set here to the same directory. rltel's heartbeat
``rltel/step`` is left out of the rows (``logger_added_keys`` shows it).
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from tests.conformance import areal_logger as al
from tests.conformance.cases import Case
from tests.conformance.cases_logger import STEP_TAG, tracker_commits
from tests.fresh_python import run_python
from tests.trackio_log import series

PROJECT, RUN = al.EXPERIMENT, al.TRIAL
"""AReaL's Trackio project and run: the experiment and trial names (no trackio.project/name)."""


def areal_config(root: Path, wandb_mode: str) -> Any:
    """AReaL's whole experiment config (:func:`~tests.conformance.areal_logger.experiment`)
    with Trackio on in local mode."""
    config = al.experiment(root, wandb_mode)
    config.stats_logger.trackio = al.cli_args().TrackioConfig(mode="local")
    return config


def rltel_config(root: Path, wandb_mode: str) -> Any:
    """The same, with rltel's ``trackio.dir`` at the ``TRACKIO_DIR`` AReaL's Trackio uses."""
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.structured(areal_config(root, wandb_mode)))
    config["stats_logger"]["trackio"]["dir"] = os.environ["TRACKIO_DIR"]
    return config


def write_and_read(side: str) -> None:
    """In a fresh interpreter whose ``TRACKIO_DIR`` is set: run ``side``'s logger on the
    commits with Trackio on, then print its Trackio run as one JSON line."""
    if side == "areal":
        al.run_areal(tracker_commits(), config=areal_config)
    else:
        al.run_rltel(tracker_commits(), config=rltel_config)
    from trackio import SQLiteStorage

    runs = SQLiteStorage.get_runs(PROJECT)
    print(json.dumps({"runs": runs, "rows": SQLiteStorage.get_logs(PROJECT, RUN)}))


@cache
def trackio_run(side: str) -> dict[str, Any]:
    """``side``'s Trackio run: the project's run names and ``{key: {step: [values]}}``."""
    with tempfile.TemporaryDirectory() as directory:
        code = (
            "import os\n"
            f"os.environ['TRACKIO_DIR'] = {directory!r}\n"
            "os.environ['HF_HUB_OFFLINE'] = '1'\n"
            "from tests.conformance.cases_trackio import write_and_read\n"
            f"write_and_read({side!r})\n"
        )
        lines = run_python(code, timeout=240).splitlines()
    (line,) = [line for line in lines if line.startswith('{"runs"')]
    logged = json.loads(line)
    found = series(logged["rows"])
    found.pop(STEP_TAG, None)
    return {"runs": logged["runs"], "series": found}


CASES = [
    Case(
        name="logger_trackio_rows",
        call="StatsLogger(config with stats_logger.trackio.mode='local', ft_spec).commit(...) x3",
        areal=lambda: trackio_run("areal"),
        rltel=lambda: trackio_run("rltel"),
    ),
]
