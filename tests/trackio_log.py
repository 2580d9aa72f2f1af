"""Read back a Trackio run with Trackio's own reader (``trackio.SQLiteStorage``), in a fresh
interpreter: Trackio fixes its data directory (``TRACKIO_DIR``) when it is imported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fresh_python import run_python

HIDDEN = ("step", "timestamp")


def trackio_run(directory: str | Path, project: str, run: str) -> dict[str, Any]:
    """``{"rows": [...], "config": {...}, "runs": [...]}`` of run ``run`` of ``project`` in
    the data directory ``directory``: its rows (``SQLiteStorage.get_logs``, each with its
    ``step``), its config and every run name of the project."""
    code = (
        "import json, os\n"
        f"os.environ['TRACKIO_DIR'] = {str(directory)!r}\n"
        "os.environ['HF_HUB_OFFLINE'] = '1'\n"
        "from trackio import SQLiteStorage\n"
        f"project, run = {project!r}, {run!r}\n"
        "print(json.dumps({'rows': SQLiteStorage.get_logs(project, run),\n"
        "    'config': SQLiteStorage.get_run_config(project, run),\n"
        "    'runs': SQLiteStorage.get_runs(project)}))\n"
    )
    (line,) = [line for line in run_python(code).splitlines() if line.startswith("{")]
    return json.loads(line)


def series(rows: list[dict[str, Any]]) -> dict[str, dict[int, list[Any]]]:
    """``{key: {step: [value, ...]}}`` of a run's rows: every value logged, in order."""
    found: dict[str, dict[int, list[Any]]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in HIDDEN:
                found.setdefault(key, {}).setdefault(row["step"], []).append(value)
    return found
