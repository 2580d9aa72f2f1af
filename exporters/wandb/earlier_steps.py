"""What earlier processes already wrote to a W&B offline run: the steps a resumed run skips.

W&B's offline mode writes each process's part of a run to its own directory
``offline-run-<time>-<id>`` (the same id; ``wandb sync`` uploads them one after the other
into that one run). A collector restarted after a crash resumes the run in a new directory
and replays what it had not acknowledged; this reads the earlier directories back with
W&B's own reader (what ``wandb leet inspect --json`` runs: its core binary) so that a step
they hold is not logged twice.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["EarlierSteps", "held_steps"]

logger = logging.getLogger(__name__)

TRAIN_AXIS = "global_step"

READ_TIMEOUT_S = 120.0


@dataclass(slots=True)
class EarlierSteps:
    """What a run already holds: per step metric its highest value (``_step``: the last
    row), and per key the highest training step that logged it."""

    axes: dict[str, float] = field(default_factory=dict)
    train_keys: dict[str, int] = field(default_factory=dict)

    def add_row(self, row: dict) -> None:
        """Count one history row in."""
        for key, value in row.items():
            if isinstance(value, int | float) and (key == "_step" or _is_axis(key)):
                self.axes[key] = max(self.axes.get(key, value), value)
        step = row.get(TRAIN_AXIS)
        if isinstance(step, int | float):
            # every key but the train axis itself: a key named ``<x>/step`` (``rltel/step``,
            # a user's ``ledger/step``, another stream's axis logged in the row) is held too
            for key in row:
                if not key.startswith("_") and key != TRAIN_AXIS:
                    self.train_keys[key] = max(self.train_keys.get(key, int(step)), int(step))


def held_steps(
    wandb_dir: str | Path, run_id: str, exclude: str | Path | None = None
) -> EarlierSteps:
    """What earlier offline parts of run ``run_id`` hold.

    Args:
        wandb_dir: the ``wandb`` directory of the run directory.
        run_id: the W&B run id.
        exclude: the current part's directory, left out.

    A part that cannot be read is logged and left out (its steps may then be logged twice).
    """
    held = EarlierSteps()
    for path in sorted(Path(wandb_dir).glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")):
        if exclude is not None and path.parent == Path(exclude):
            continue
        try:
            rows = _history(path)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            logger.warning("wandb: cannot read the earlier part %s: %s", path, exc)
            continue
        for row in rows:
            held.add_row(row)
    return held


def _is_axis(key: str) -> bool:
    return key == TRAIN_AXIS or key.endswith("/step")


def _history(path: Path) -> list[dict]:
    """The history rows of one ``.wandb`` file, read by W&B's core binary (what ``wandb
    leet inspect --json`` runs, without starting a Python interpreter)."""
    from wandb.util import get_core_path

    command = [get_core_path(), "leet", "inspect", "--no-observability", "--json"]
    out = subprocess.run(
        [*command, "--run-file", str(path), str(path.parent.parent)],
        capture_output=True,
        text=True,
        timeout=READ_TIMEOUT_S,
        check=True,
    )
    rows = []
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("type") == "history":
                rows.append(record["history"]["item"])
    return rows
