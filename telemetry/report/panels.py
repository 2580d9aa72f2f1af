"""Drawing helpers shared by the figures: tag matching, line panels, absent data, read-back.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, no
display, no global state). What a figure plotted is read back from its axes
(:func:`axes_data`) and saved as JSON next to the PNG, so the data file is what was drawn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from telemetry.report.runs import Run, Series

STEP_LABEL = "global step"
# per-rank spread keys (drawn by the per-rank figure only)
PER_RANK = re.compile(r"/(rank_min|rank_max|slowest_rank)$")
LINESTYLES = ("-", "--", ":", "-.")
NUMBER = re.compile(r"(\d+(?:\.\d+)?)")
MARKERS_UP_TO = 30  # points; sparser series (evaluations) get markers


@dataclass(frozen=True, slots=True)
class Panel:
    """One axes: every tag matching one of ``patterns`` (``re.search``), scaled by ``scale``."""

    title: str
    ylabel: str
    patterns: tuple[str, ...]
    scale: float = 1.0
    logy: bool = False


def matching_tags(runs: Sequence[Run], patterns: Sequence[str]) -> list[str]:
    """Tags of any run matching any pattern, per-rank keys excluded, in pattern then name order."""
    out: list[str] = []
    for pattern in patterns:
        regex = re.compile(pattern)
        found = {
            t for run in runs for t in run.scalars if regex.search(t) and not PER_RANK.search(t)
        }
        out += sorted(found - set(out), key=natural_key)
    return out


def natural_key(tag: str) -> list[Any]:
    """Sort key reading numbers as numbers: ``ratio_outside_2`` before ``ratio_outside_10``."""
    return [(0, float(p), "") if i % 2 else (1, 0.0, p) for i, p in enumerate(NUMBER.split(tag))]


def short_labels(tags: Sequence[str]) -> dict[str, str]:
    """Each tag without the ``/``-separated prefix all of them share (whole tag when alone)."""
    if len(tags) < 2:
        return {t: t for t in tags}
    parts = [t.split("/") for t in tags]
    common = 0
    while all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
        common += 1
    return {t: "/".join(p[common:]) for t, p in zip(tags, parts)}


def series_label(run: Run, tag_label: str, runs: int, tags: int) -> str:
    """Legend text: the tag for one run, the run for one tag, both otherwise."""
    if runs == 1:
        return tag_label
    return run.label if tags == 1 else f"{run.label}: {tag_label}"


def draw_lines(ax: Any, runs: Sequence[Run], panel: Panel) -> bool:
    """Draw a panel's matching series; returns False (and says so on the axes) when none."""
    tags = matching_tags(runs, panel.patterns)
    label_of = short_labels(tags)
    for r, run in enumerate(runs):
        for t, tag in enumerate(tags):
            series = run.scalars.get(tag)
            if series is None:
                continue
            plot(
                ax,
                series.steps,
                series.values * panel.scale,
                series_label(run, label_of[tag], len(runs), len(tags)),
                color=f"C{(t if len(runs) == 1 or len(tags) > 1 else r) % 10}",
                linestyle=LINESTYLES[r % len(LINESTYLES)],
            )
    decorate(ax, panel.title, panel.ylabel)
    if panel.logy and tags:
        ax.set_yscale("symlog", linthresh=1e-6)
    if not tags:
        absent(ax, "no data: no TensorBoard tag matches " + " or ".join(panel.patterns))
        return False
    return True


def plot(ax: Any, steps: Any, values: Any, label: str, **style: Any) -> None:
    """One line; markers when the series is sparse."""
    marker = "o" if len(steps) <= MARKERS_UP_TO else None
    ax.plot(steps, values, label=label, marker=marker, markersize=3, linewidth=1.2, **style)


def decorate(ax: Any, title: str, ylabel: str, xlabel: str = STEP_LABEL, grid: bool = True) -> None:
    """Title, axis labels, integer x ticks (steps, indices), legend when there are lines."""
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if grid:
        ax.grid(True, alpha=0.3)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if data_lines(ax):
        ax.legend(fontsize=7, loc="best")


def data_lines(ax: Any) -> list[Any]:
    """The axes' labelled lines (reference lines such as ``axhline`` have ``_`` labels)."""
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def absent(ax: Any, message: str) -> None:
    """Say on the axes that its data is absent (wrapped to fit)."""
    ax.text(
        0.5,
        0.5,
        _wrap(message, 60),
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=8,
        color="0.35",
        gid="absent",
    )


def _wrap(text: str, width: int) -> str:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def union_steps(series: Sequence[Series]) -> np.ndarray:
    return np.unique(np.concatenate([s.steps for s in series])) if series else np.array([])


def _json_value(v: float) -> float | None:
    return v if math.isfinite(v) else None


def axes_data(figure: Any) -> dict[str, Any]:
    """What each axes of ``figure`` shows: titles, labels, lines (legend text, x, y),
    heatmap arrays and absent-data messages. Non-finite numbers become null."""
    out = []
    for ax in figure.get_axes():
        if ax.get_label() == "<colorbar>":
            continue
        legend = ax.get_legend()
        entry: dict[str, Any] = {
            "title": ax.get_title(),
            "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(),
            "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
            "lines": [
                {
                    "label": line.get_label(),
                    "x": [_json_value(float(x)) for x in np.asarray(line.get_xdata(), float)],
                    "y": [_json_value(float(y)) for y in np.asarray(line.get_ydata(), float)],
                }
                for line in data_lines(ax)
            ],
            "images": [
                [
                    [_json_value(float(v)) for v in row]
                    for row in np.ma.filled(im.get_array(), np.nan)
                ]
                for im in ax.images
            ],
            "absent": [t.get_text() for t in ax.texts if t.get_gid() == "absent"],
        }
        out.append(entry)
    return {"axes": out}
