"""The report's per-rank figure: the slowest rank per step and each key's spread across
ranks (``<key>/rank_min`` .. ``<key>/rank_max``), for every key the straggler view exports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rltel.report.canvas import new_figure
from rltel.report.panels import (
    MARKERS,
    PER_RANK,
    Drawn,
    Line,
    Zero,
    absent,
    all_zero,
    data_lines,
    decorate,
    draw_series,
)
from rltel.report.runs import Run
from telemetry.model.units import key_unit

MAX_SPREAD_KEYS = 6
DODGE_PT = 3.0  # slowest-rank points of different keys sit this far apart around the rank


def unit_of(key: str) -> str:
    """A y label with the unit a key's name implies."""
    if key_unit(key) == "s" or key.endswith("seconds"):
        return "time (s)"
    if key.endswith("tokens"):
        return "tokens (count)"
    if "flops" in key:
        return "FLOPs (count)"
    return "value (unit of the key)"


def spread_colour(runs: Sequence[Run], b: int, r: int) -> str:
    """Key ``b``'s colour for one run, run ``r``'s for several."""
    return f"C{(b if len(runs) == 1 else r) % 10}"


def spread_lines(runs: Sequence[Run], base: str, b: int) -> list[Line]:
    """``base`` (key ``b``)'s rank_min (dashed) and rank_max (solid) per run."""
    lines = []
    for r, run in enumerate(runs):
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        for end, linestyle in (("rank_min", "--"), ("rank_max", "-")):
            s = run.scalars.get(f"{base}/{end}")
            if s is not None:
                style = {"color": spread_colour(runs, b, r), "linestyle": linestyle}
                lines.append(Line(f"{prefix}{end}", end, s.steps, s.values, style))
    return lines


def draw_spread(ax: Any, runs: Sequence[Run], base: str, b: int) -> None:
    """Key ``b``'s rank_min..rank_max band per run, the two ends as lines."""
    for r, run in enumerate(runs):
        low, high = run.scalars.get(f"{base}/rank_min"), run.scalars.get(f"{base}/rank_max")
        if low is not None and high is not None and np.array_equal(low.steps, high.steps):
            colour = spread_colour(runs, b, r)
            ax.fill_between(low.steps, low.values, high.values, color=colour, alpha=0.15)
    note = draw_series(ax, spread_lines(runs, base, b))
    decorate(ax, f"{base}: spread across ranks (min..max)", unit_of(base), note=note)


def draw_slowest(ax: Any, runs: Sequence[Run], bases: Sequence[str]) -> None:
    """Each key's slowest rank per step as points on integer rank rows; keys are dodged
    vertically by ``DODGE_PT`` so points of equal rank stay visible (the data stays exact)."""
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import offset_copy

    found = [
        (f"{run.label}: {base}" if len(runs) > 1 else base, s)
        for run in runs
        for base in bases
        if (s := run.scalars.get(f"{base}/slowest_rank")) is not None
    ]
    for i, (label, s) in enumerate(found):
        (points,) = ax.plot(
            s.steps,
            s.values,
            label=label,
            linestyle="none",
            marker=MARKERS[i % len(MARKERS)],
            markersize=4,
            color=f"C{i % 10}",
        )  # limits from the data; the dodge only moves the drawing
        dodge = (i - (len(found) - 1) / 2) * DODGE_PT
        points.set_transform(offset_copy(ax.transData, fig=ax.figure, y=dodge, units="points"))
    decorate(ax, "Slowest rank per step", "rank (index)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if found:
        top = max(float(np.nanmax(s.values, initial=0.0)) for _, s in found)
        ax.set_ylim(-0.5, top + 0.5)


def draw_per_rank(runs: Sequence[Run]) -> Drawn:
    """The slowest rank per step, and each key's spread across ranks (rank_min..rank_max);
    keys whose spread is all zero are only named."""
    bases = sorted({PER_RANK.sub("", t) for run in runs for t in run.scalars if PER_RANK.search(t)})
    spreads = {base: spread_lines(runs, base, b) for b, base in enumerate(bases)}
    zero = tuple(
        Zero.of(f"{base}: spread across ranks", lines)
        for base, lines in spreads.items()
        if all_zero(lines)
    )
    drawn = [base for base, lines in spreads.items() if lines and not all_zero(lines)]
    shown = drawn[:MAX_SPREAD_KEYS]
    figure, axes = new_figure(1 + (len(shown) if bases else 1), height=3.0)
    draw_slowest(axes[0], runs, bases[:MAX_SPREAD_KEYS])
    for ax, base in zip(axes[1:], shown):
        draw_spread(ax, runs, base, bases.index(base))
    more = f"; first {MAX_SPREAD_KEYS} of {len(drawn)} keys" if len(drawn) > len(shown) else ""
    if not bases:
        decorate(axes[1], "Spread across ranks (min..max)", "value (unit of the key)")
        for ax in axes:
            absent(ax, "no per-rank data (no tags ending in /rank_min, /rank_max or /slowest_rank)")
    elif not data_lines(axes[0]):
        absent(axes[0], "no data: no tag ending in /slowest_rank")
    figure.suptitle(f"Per-rank spread{more}")
    return Drawn(figure, zero)
