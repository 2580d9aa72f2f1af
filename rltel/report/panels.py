"""Drawing helpers shared by the figures: tag matching, line panels, absent data, read-back.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, no
display, no global state). What a figure plotted is read back from its axes
(:func:`axes_data`) and saved as JSON next to the PNG, so the data file is what was drawn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rltel.report.runs import Run

STEP_LABEL = "global step"
# per-rank spread keys (drawn by the per-rank figure only)
PER_RANK = re.compile(r"/(rank_min|rank_max|slowest_rank)$")
RANK_DETAIL = re.compile(r"/(top_k|chronic)/|/per_rank(/|$)")
"""The straggler view's top-k, chronic and per-rank series: ranks and counts, not values."""
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
NUMBER = re.compile(r"(\d+(?:\.\d+)?)")
MARKERS_UP_TO = 30  # points; sparser series (evaluations) get markers
DPI = 100
PANEL_WIDTH_IN = 6.2  # two columns at most: 1240 px, shown 1:1 on the page (build.PAGE_WIDTH_PX)
LEGEND_PT = 9.0  # 12.5 px at 1:1, as legible as the tick labels (10 pt)
COINCIDE_FRACTION = 0.015  # series this close (share of the y range, ~4 px) draw over each other
NOTE_CHARS = 44  # a legend title's line (the coincide notes)


@dataclass(frozen=True, slots=True)
class Panel:
    """One axes: every tag matching one of ``patterns`` (``re.search``), scaled by ``scale``."""

    title: str
    ylabel: str
    patterns: tuple[str, ...]
    scale: float = 1.0
    logy: bool = False


@dataclass(frozen=True, slots=True)
class Line:
    """One series to draw: legend label, its key without the run, steps, values, style."""

    label: str
    key: str
    steps: np.ndarray
    values: np.ndarray
    style: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Zero:
    """A panel left out because every value of every series in it is 0 (in every run): its
    title and the series' keys."""

    title: str
    series: tuple[str, ...]

    @classmethod
    def of(cls, title: str, lines: Sequence[Line]) -> Zero:
        return cls(title, tuple(dict.fromkeys(line.key for line in lines)))

    def describe(self) -> str:
        return f"{self.title} ({join_labels(self.series, ', ')})"


@dataclass(frozen=True, slots=True)
class Drawn:
    """A figure (None when every panel was all zero) and the panels left out as all zero."""

    figure: Any | None
    zero: tuple[Zero, ...] = ()


def matching_tags(runs: Sequence[Run], patterns: Sequence[str]) -> list[str]:
    """Tags of any run matching any pattern, per-rank and straggler-view keys excluded, in
    pattern then name order."""
    out: list[str] = []
    for pattern in patterns:
        regex = re.compile(pattern)
        found = {
            t
            for run in runs
            for t in run.scalars
            if regex.search(t) and not PER_RANK.search(t) and not RANK_DETAIL.search(t)
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


def panel_lines(runs: Sequence[Run], panel: Panel) -> list[Line]:
    """The series a line panel draws: one per run and matching tag, scaled, styled."""
    tags = matching_tags(runs, panel.patterns)
    label_of = short_labels(tags)
    lines = []
    for r, run in enumerate(runs):
        for t, tag in enumerate(tags):
            series = run.scalars.get(tag)
            if series is None:
                continue
            style = {
                "color": f"C{(t if len(runs) == 1 or len(tags) > 1 else r) % 10}",
                "linestyle": LINESTYLES[r % len(LINESTYLES)],
            }
            label = series_label(run, label_of[tag], len(runs), len(tags))
            values = series.values * panel.scale
            lines.append(Line(label, label_of[tag], series.steps, values, style))
    return lines


def all_zero(lines: Sequence[Line]) -> bool:
    """Whether there are lines and every value of every one is 0."""
    return bool(lines) and all(np.all(line.values == 0) for line in lines)


def draw_panel(ax: Any, panel: Panel, lines: Sequence[Line]) -> None:
    """Draw a line panel's series, or say on the axes that no tag matched."""
    note = draw_series(ax, lines)
    decorate(ax, panel.title, panel.ylabel, note=note)
    if not lines:
        absent(ax, "no data: no TensorBoard tag matches " + " or ".join(panel.patterns))
    elif panel.logy:
        ax.set_yscale("symlog", linthresh=1e-6)


def draw_series(ax: Any, lines: Sequence[Line]) -> str:
    """Plot ``lines``; series drawn over each other get distinct line styles and markers
    (interleaved along the line so every colour shows). Returns the note naming them."""
    styles = [dict(line.style) for line in lines]
    notes = []
    for group in coinciding(lines):
        if len(group) < 2:
            continue
        for i, index in enumerate(group):
            styles[index].update(
                linestyle=LINESTYLES[i % len(LINESTYLES)],
                marker=MARKERS[i % len(MARKERS)],
                markevery=(i, len(group)),
                markersize=5,
            )
        labels = [lines[index].label for index in group]
        notes.append(_wrap("coincide: " + join_labels(labels), NOTE_CHARS))
    for line, style in zip(lines, styles):
        plot(ax, line.steps, line.values, line.label, **style)
    return "\n".join(notes)


def coinciding(lines: Sequence[Line]) -> list[list[int]]:
    """Indices of ``lines`` grouped by series that draw over each other: same steps and values
    within ``COINCIDE_FRACTION`` of the y range of all of them (each group keeps line order)."""
    values = np.concatenate([line.values for line in lines]) if lines else np.zeros(0)
    finite = values[np.isfinite(values)]
    tolerance = COINCIDE_FRACTION * float(np.ptp(finite)) if len(finite) else 0.0
    groups: list[list[int]] = []
    for i, line in enumerate(lines):
        for group in groups:
            first = lines[group[0]]
            if np.array_equal(first.steps, line.steps) and np.allclose(
                first.values, line.values, rtol=0.0, atol=tolerance, equal_nan=True
            ):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def join_labels(labels: Sequence[str], separator: str = " = ") -> str:
    """The labels with a common start (cut after ``_``, ``/``, ``:`` or space) and a common
    end (from ``/`` or ``:``) factored out: ``a_{x, y}``, ``{run0, run1}: tag``; else the
    labels joined by ``separator``."""
    prefix = _common_start(labels, "_/: ")
    suffix = _common_start([label[len(prefix) :][::-1] for label in labels], "/:")[::-1]
    rests = [label[len(prefix) : len(label) - len(suffix)] for label in labels]
    if len(labels) < 2 or not (prefix or suffix) or not all(rests):
        return separator.join(labels)
    return f"{prefix}{{{', '.join(rests)}}}{suffix}"


def _common_start(texts: Sequence[str], separators: str) -> str:
    """The start all ``texts`` share, up to and including its last separator character."""
    start = texts[0] if texts else ""
    for text in texts[1:]:
        while not text.startswith(start):
            start = start[:-1]
    return start[: max(start.rfind(c) for c in separators) + 1]


def plot(ax: Any, steps: Any, values: Any, label: str, **style: Any) -> None:
    """One line; markers when the series is sparse (unless ``style`` chooses them)."""
    style.setdefault("marker", "o" if len(steps) <= MARKERS_UP_TO else None)
    style.setdefault("markersize", 3)
    ax.plot(steps, values, label=label, linewidth=1.2, **style)


def decorate(
    ax: Any,
    title: str,
    ylabel: str,
    xlabel: str = STEP_LABEL,
    grid: bool = True,
    note: str = "",
) -> None:
    """Title, axis labels, integer x ticks (steps, indices), legend (``note`` as its title)
    when there are lines."""
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
        ax.legend(
            fontsize=LEGEND_PT,
            title=note or None,
            title_fontsize=LEGEND_PT,
            alignment="left",
            loc="best",
        )


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
            "legend_title": legend.get_title().get_text() if legend else "",
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
