"""How to look at a finished ``rltel demo`` run: only the commands that can work.

``rltel report`` and ``tensorboard`` are named when the run wrote TensorBoard files, ``wandb
leet`` when it wrote a W&B run, ``trackio show`` when it wrote a Trackio run; otherwise a
line says what is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rltel.demo.files import RunFiles
from rltel.demo.health import CollectorHealth
from telemetry.config import TENSORBOARD_DIR, TRACKIO_DIR, WANDB_DIR


@dataclass(frozen=True)
class Hints:
    """Where a run's files are, as far as the demo knows.

    Attributes:
        run_dir: the run directory (``FILEROOT/EXPERIMENT/TRIAL``).
        tensorboard: its TensorBoard directory, if TensorBoard files were written.
        wandb: its W&B directory, if a W&B run was written.
        prometheus: the Prometheus endpoint and how long it stays up.
        notes: lines that say where the files are or why a command is missing.
        trackio: its Trackio data directory, if a Trackio run was written.
    """

    run_dir: Path | None
    tensorboard: Path | None = None
    wandb: Path | None = None
    prometheus: str | None = None
    notes: tuple[str, ...] = ()
    trackio: Path | None = None


def local_hints(files: RunFiles, prometheus: str | None) -> Hints:
    """Hints for a run directory on this machine, from what this run wrote there."""
    run_dir = files.run_dir
    return Hints(
        run_dir,
        run_dir / TENSORBOARD_DIR if files.wrote(TENSORBOARD_DIR) else None,
        run_dir / WANDB_DIR if files.wrote(WANDB_DIR) else None,
        prometheus,
        trackio=run_dir / TRACKIO_DIR if files.wrote(TRACKIO_DIR) else None,
    )


def collector_hints(health: CollectorHealth | str, endpoint: str, run: str) -> Hints:
    """Hints for run ``run`` of a collector the demo did not start, from the collector's
    health (or the reason it could not be read)."""
    if isinstance(health, str):
        note = (
            f"which files the collector at {endpoint} wrote is unknown: {health}; give the "
            "port of its Prometheus endpoint with --prometheus-port"
        )
        return Hints(None, notes=(note,))
    where = health.run_dirs.get(run)
    if where is None:
        return Hints(None, notes=(f"the collector at {endpoint} reports no run {run}",))
    run_dir = Path(where)
    return Hints(
        run_dir,
        run_dir / TENSORBOARD_DIR if health.wrote(run, "tensorboard") else None,
        run_dir / WANDB_DIR if health.wrote(run, "wandb") else None,
        notes=(f"the files are the collector's at {endpoint}, on its host",),
        trackio=run_dir / TRACKIO_DIR if health.wrote(run, "trackio") else None,
    )


def print_hints(hints: Hints, stream: TextIO | None = None) -> None:
    """Print the commands that show the run."""
    out = stream or sys.stdout
    lines = ["", "How to look at this run:"]
    if hints.run_dir is not None and hints.tensorboard is not None:
        drawn = importlib.util.find_spec("matplotlib") is not None
        needs = "" if drawn else "  (needs: pip install rltel[report])"
        lines.append(f"  rltel report {hints.run_dir}{needs}")
        lines.append(f"  tensorboard --logdir {hints.tensorboard}")
    elif hints.run_dir is not None:
        lines.append("  (no TensorBoard files were written: rltel report has nothing to read)")
    if hints.wandb is not None:
        lines.append(f"  wandb leet {hints.wandb}")
    if hints.trackio is not None:  # Trackio reads the data directory its TRACKIO_DIR names
        lines.append(f"  TRACKIO_DIR={hints.trackio} trackio show")
    if hints.prometheus:
        lines.append(f"  Prometheus: {hints.prometheus}")
    lines += [f"  ({note})" for note in hints.notes]
    out.write("\n".join(lines) + "\n")
    out.flush()
