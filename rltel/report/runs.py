"""A run's recorded series, read from its TensorBoard event files with TensorBoard's reader.

A run directory is ``FILEROOT/EXPERIMENT/TRIAL``, laid out as the demo and the collector
write it (``tensorboard/``, ``wandb/``, ``swanlog/``); its event files
(``events.out.tfevents.*``) may sit anywhere below it. An experiment directory (trials
below it, none of its own) is refused with a line naming its trials.
Scalars come from ``EventAccumulator`` (all of them: no reservoir sampling). The
per-expert MoE loads are not in TensorBoard (the seed keeps it to per-layer summaries),
so they come from TensorBoard tags ``moe_balance/layer_<i>/expert_<e>/load_percent``
when some writer put them there, else from the W&B offline tables
(``moe_balance/expert_loads``) that the W&B sink writes into the same run directory.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from telemetry.config import SWANLAB_DIR, TENSORBOARD_DIR, WANDB_DIR

RUN_ENTRIES = (TENSORBOARD_DIR, WANDB_DIR, SWANLAB_DIR)
SHOWN_TRIALS = 5
EVENT_GLOB = "events.out.tfevents.*"
EXPERT_TAG = re.compile(r"^moe_balance/layer_(\d+)/expert_(\d+)/load_percent$")
WANDB_TABLE = re.compile(r"expert_loads_(\d+)_[0-9a-f]+\.table\.json$")


class ReportInputError(ValueError):
    """A run directory the report cannot use; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class Series:
    """One tag's values by step, sorted by step (the last value written for a step wins)."""

    steps: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Run:
    """What the report draws from one run directory."""

    path: Path
    label: str
    scalars: dict[str, Series]
    event_files: tuple[Path, ...]
    experts: dict[int, np.ndarray] = field(default_factory=dict)  # step -> [layer, expert] %
    expert_source: str | None = None

    def steps(self) -> tuple[int, int] | None:
        """First and last step over all tags, or None without data."""
        ends = [(int(s.steps[0]), int(s.steps[-1])) for s in self.scalars.values() if len(s.steps)]
        return (min(a for a, _ in ends), max(b for _, b in ends)) if ends else None


@dataclass(frozen=True, slots=True)
class Filters:
    """``--since``/``--until`` (inclusive steps) and ``--keys`` globs; None means no limit."""

    since: int | None = None
    until: int | None = None
    keys: tuple[str, ...] = ()

    def keep_tag(self, tag: str) -> bool:
        return not self.keys or any(fnmatch.fnmatchcase(tag, k) for k in self.keys)

    def keep_step(self, step: int) -> bool:
        return (self.since is None or step >= self.since) and (
            self.until is None or step <= self.until
        )

    def describe(self) -> str:
        parts = [f"--since {self.since}"] if self.since is not None else []
        parts += [f"--until {self.until}"] if self.until is not None else []
        parts += [f"--keys {k}" for k in self.keys]
        return " ".join(parts)


def load_run(path: str | Path, filters: Filters | None = None, exclude: Path | None = None) -> Run:
    """Read a run directory's scalars (and per-expert MoE loads where recorded).

    Args:
        path: the trial directory ``FILEROOT/EXPERIMENT/TRIAL``.
        filters: step range and tag globs to keep.
        exclude: a directory below ``path`` to skip (the report's own output).

    Raises:
        ReportInputError: not a directory, no event files, an unreadable event file, or
            no scalar left (empty run, or nothing inside the filters).
    """
    from tensorboard.backend.event_processing import event_accumulator as ea

    filters = filters or Filters()
    root = Path(path)
    if not root.exists():
        raise ReportInputError(f"{str(root)!r} does not exist")
    if not root.is_dir():
        raise ReportInputError(f"{str(root)!r} is not a directory (give FILEROOT/EXPERIMENT/TRIAL)")
    _refuse_experiment(root)
    skip = exclude.resolve() if exclude is not None else None
    files = sorted(
        f
        for f in root.rglob(EVENT_GLOB)
        if f.is_file() and (skip is None or skip not in f.resolve().parents)
    )
    if not files:
        raise ReportInputError(
            f"{str(root)!r} is not a run directory: no TensorBoard event files ({EVENT_GLOB}) "
            "under it"
        )
    by_step: dict[str, dict[int, float]] = {}
    for file in files:
        accumulator = _read(ea, file)
        for tag in accumulator.Tags().get(ea.SCALARS, []):
            if not filters.keep_tag(tag):
                continue
            values = by_step.setdefault(tag, {})
            for event in accumulator.Scalars(tag):
                if filters.keep_step(event.step):
                    values[event.step] = event.value
    scalars = {tag: _series(v) for tag, v in sorted(by_step.items()) if v}
    experts, source = _experts_from_tags(scalars)
    if not experts:
        experts, source = _experts_from_wandb(root, filters)
    if not scalars and not experts:
        where = f" within {filters.describe()}" if filters.describe() else ""
        raise ReportInputError(f"{str(root)!r} has no scalar data in its TensorBoard events{where}")
    return Run(root, _label(root), scalars, tuple(files), experts, source)


def _is_run_dir(path: Path) -> bool:
    """A run directory holds a sink's folder (``tensorboard/``, ``wandb/``, ``swanlog/``)."""
    return any((path / entry).is_dir() for entry in RUN_ENTRIES)


def _refuse_experiment(root: Path) -> None:
    """Raise when ``root`` is not a run directory but holds run directories (its trials)."""
    if _is_run_dir(root):
        return
    trials = sorted(child.name for child in root.iterdir() if child.is_dir() and _is_run_dir(child))
    if not trials:
        return
    shown = ", ".join(trials[:SHOWN_TRIALS]) + (", ..." if len(trials) > SHOWN_TRIALS else "")
    raise ReportInputError(
        f"{str(root)!r} is an experiment directory (trials: {shown}): give a trial, e.g. "
        f"rltel report {root / trials[0]}, or several trials with --out DIR"
    )


def _read(ea, file: Path):
    """One event file through EventAccumulator; a non-empty file without events is an error."""
    try:
        with file.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ReportInputError(f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc
    accumulator = ea.EventAccumulator(
        str(file), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 1, ea.TENSORS: 1, ea.IMAGES: 1}
    )
    try:
        accumulator.Reload()
        accumulator.FirstEventTimestamp()
    except ValueError as exc:  # no event at all: not an event file, or corrupt from the start
        if file.stat().st_size == 0:  # created by a writer that has not flushed yet
            return accumulator
        raise ReportInputError(
            f"cannot read {str(file)!r}: not a TensorBoard event file or corrupt from its start"
        ) from exc
    except Exception as exc:  # the reader's own errors (e.g. a bad record it cannot skip)
        raise ReportInputError(f"cannot read {str(file)!r}: {exc}") from exc
    return accumulator


def _series(values: dict[int, float]) -> Series:
    steps = np.array(sorted(values), dtype=np.int64)
    return Series(steps, np.array([values[s] for s in steps.tolist()], dtype=np.float64))


def _label(root: Path) -> str:
    """``experiment/trial`` from the directory layout."""
    resolved = root.resolve()
    return f"{resolved.parent.name}/{resolved.name}"


def _experts_from_tags(scalars: dict[str, Series]) -> tuple[dict[int, np.ndarray], str | None]:
    cells = {}
    for tag, series in scalars.items():
        match = EXPERT_TAG.match(tag)
        if match:
            cells[int(match[1]), int(match[2])] = series
    if not cells:
        return {}, None
    steps = sorted({int(s) for series in cells.values() for s in series.steps})
    out = {step: _grid(cells) for step in steps}
    for (layer, expert), series in cells.items():
        for step, value in zip(series.steps.tolist(), series.values.tolist()):
            out[step][layer, expert] = value
    return out, "TensorBoard tags moe_balance/layer_<i>/expert_<e>/load_percent"


def _experts_from_wandb(root: Path, filters: Filters) -> tuple[dict[int, np.ndarray], str | None]:
    if not filters.keep_tag("moe_balance/layer_0/expert_0/load_percent"):
        return {}, None
    rows_by_step: dict[int, list[tuple[int, int, float]]] = {}
    for file in sorted(root.glob("wandb/*/files/media/table/**/expert_loads_*.table.json")):
        match = WANDB_TABLE.search(file.name)
        if not match or not filters.keep_step(int(match[1])):
            continue
        try:
            table = json.loads(file.read_text())
            columns = table["columns"]
            at = [columns.index(c) for c in ("layer", "expert", "load_percent")]
            rows = [(int(r[at[0]]), int(r[at[1]]), float(r[at[2]])) for r in table["data"]]
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise ReportInputError(f"cannot read W&B table {str(file)!r}: {exc}") from exc
        rows_by_step[int(match[1])] = rows  # a resumed run's later table for a step wins
    out = {}
    for step, rows in sorted(rows_by_step.items()):
        grid = _grid({(layer, expert): None for layer, expert, _ in rows})
        for layer, expert, value in rows:
            grid[layer, expert] = value
        out[step] = grid
    return out, ("W&B tables moe_balance/expert_loads" if out else None)


def _grid(cells: dict[tuple[int, int], object]) -> np.ndarray:
    layers = 1 + max(layer for layer, _ in cells)
    experts = 1 + max(expert for _, expert in cells)
    return np.full((layers, experts), np.nan)


def load_runs(
    paths: Sequence[str | Path], filters: Filters | None = None, exclude: Path | None = None
) -> list[Run]:
    """:func:`load_run` for each path; labels made unique (the path where two collide)."""
    runs = [load_run(p, filters, exclude) for p in paths]
    labels = [r.label for r in runs]
    return [
        Run(r.path, str(r.path), r.scalars, r.event_files, r.experts, r.expert_source)
        if labels.count(r.label) > 1
        else r
        for r in runs
    ]
