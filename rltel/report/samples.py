"""The report's samples section, read from a run's ``samples.jsonl``.

Per stream: the kept samples of the last step in range (``--until STEP`` chooses the step),
the lowest- and highest-reward sample first, then the rest by reward; and per step the
distribution of completion lengths, as a table and as a figure (:func:`draw_lengths`: min,
quartiles, median and max per step, one panel per stream). A length is the sample's numeric
``length`` field where the stream's rows have one (the demo's tokens), else its completion's
characters. Every text is HTML-escaped.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rltel.report.canvas import new_figure
from rltel.report.panels import Drawn, decorate, plot
from rltel.report.runs import Filters, Run

SAMPLES_FILE = "samples.jsonl"
_META = ("step", "stream", "truncated")
LENGTHS_FIGURE = "sample_lengths"
LENGTHS_TITLE = "Completion length of the kept samples over steps"
MAX_LENGTH_PANELS = 4
QUANTILES = (("min", 0, ":"), ("25%", 25, "--"), ("median", 50, "-"), ("75%", 75, "--"))
QUANTILES += (("max", 100, ":"),)


def read_samples(path: Path, filters: Filters) -> list[dict[str, Any]]:
    """The rows of ``samples.jsonl`` at steps ``filters`` keeps; a malformed line is skipped."""
    rows = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(row, dict)
            and isinstance(row.get("step"), int)
            and "stream" in row
            and filters.keep_step(row["step"])
        ):
            rows.append(row)
    return rows


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lowest-reward row, the highest, then the rest by reward (rows without one last)."""
    rated = sorted((r for r in rows if _reward(r) is not None), key=_reward)
    unrated = [r for r in rows if _reward(r) is None]
    if len(rated) < 2:
        return rated + unrated
    return [rated[0], rated[-1], *rated[1:-1], *unrated]


def samples_html(run: Run, filters: Filters) -> str:
    """The run's samples section; empty when the run has no ``samples.jsonl`` rows."""
    rows = read_samples(Path(run.path) / SAMPLES_FILE, filters)
    if not rows:
        return ""
    esc = html.escape
    parts = [f"<section id='samples-{esc(run.label)}'><h2>Samples: {esc(run.label)}</h2>"]
    for stream in sorted({str(r["stream"]) for r in rows}):
        mine = [r for r in rows if str(r["stream"]) == stream]
        last = max(r["step"] for r in mine)
        shown = ordered([r for r in mine if r["step"] == last])
        columns = list(dict.fromkeys(k for r in shown for k in r if k not in _META))
        head = "".join(f"<th>{esc(c)}</th>" for c in [*columns, "truncated"])
        body = "".join(
            "<tr>"
            + "".join(f"<td class='text'>{esc(_cell(r.get(c)))}</td>" for c in columns)
            + f"<td>{esc(', '.join(map(str, r.get('truncated') or [])))}</td></tr>"
            for r in shown
        )
        parts.append(
            f"<h3>{esc(stream)}: step {last} ({len(shown)} kept)</h3>"
            f"<table class='samples'><tr>{head}</tr>{body}</table>{_lengths(mine)}"
        )
    parts.append("</section>")
    return "".join(parts)


def lengths_by_step(rows: list[dict[str, Any]]) -> tuple[dict[int, list[float]], str]:
    """One stream's lengths per step, and their unit: the numeric ``length`` field when a
    row has one (rows without it are left out), else the completion's characters."""
    has_field = any(_number(row.get("length")) is not None for row in rows)
    by_step: dict[int, list[float]] = {}
    for row in rows:
        if has_field:
            length = _number(row.get("length"))
        else:
            text = row.get("completion")
            length = float(len(text)) if isinstance(text, str) else None
        if length is not None:
            by_step.setdefault(row["step"], []).append(length)
    return by_step, "the samples' length field" if has_field else "characters"


def _lengths(rows: list[dict[str, Any]]) -> str:
    """Per step: count, min, median and max completion length of the kept samples."""
    by_step, unit = lengths_by_step(rows)
    if not by_step:
        return ""
    lines = "".join(
        f"<tr><td>{step}</td><td>{len(n)}</td><td>{min(n):g}</td>"
        f"<td>{statistics.median(n):g}</td><td>{max(n):g}</td></tr>"
        for step, n in sorted(by_step.items())
    )
    return (
        f"<p>Completion length ({html.escape(unit)}) of the kept samples per step:</p>"
        "<table class='lengths'><tr><th>step</th><th>samples</th><th>min</th><th>median</th>"
        f"<th>max</th></tr>{lines}</table>"
    )


def draw_lengths(runs: Sequence[Run], filters: Filters) -> Drawn:
    """The completion-length distribution over steps: per stream (the first
    :data:`MAX_LENGTH_PANELS`) a panel of the min, quartiles, median and max per step, one set
    per run; no figure when no run has samples."""
    per_run = [(run, read_samples(Path(run.path) / SAMPLES_FILE, filters)) for run in runs]
    streams = sorted({str(row["stream"]) for _, rows in per_run for row in rows})
    shown = [s for s in streams if _stream_has_lengths(per_run, s)][:MAX_LENGTH_PANELS]
    if not shown:
        return Drawn(None)
    figure, axes = new_figure(len(shown))
    for ax, stream in zip(axes, shown):
        units = set()
        for run, rows in per_run:
            by_step, unit = lengths_by_step([r for r in rows if str(r["stream"]) == stream])
            if not by_step:
                continue
            units.add(unit)
            steps = sorted(by_step)
            prefix = f"{run.label} " if len(runs) > 1 else ""
            for name, q, style in QUANTILES:
                values = [float(np.percentile(by_step[step], q)) for step in steps]
                plot(ax, steps, values, f"{prefix}{name}", linestyle=style)
        decorate(ax, f"{stream}: length per step", f"length ({' / '.join(sorted(units))})")
        low, high = ax.get_xlim()
        if high - low < 2:  # one step: whole steps around it, not fractions
            ax.set_xlim(round((low + high) / 2) - 1, round((low + high) / 2) + 1)
    more = f"; first {len(shown)} of {len(streams)} streams" if len(streams) > len(shown) else ""
    figure.suptitle(LENGTHS_TITLE + more)
    return Drawn(figure)


def _stream_has_lengths(per_run: list[tuple[Run, list[dict[str, Any]]]], stream: str) -> bool:
    return any(
        lengths_by_step([r for r in rows if str(r["stream"]) == stream])[0] for _, rows in per_run
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _reward(row: dict[str, Any]) -> float | None:
    return _number(row.get("reward"))


def _cell(value: Any) -> str:
    return "" if value is None else str(value)
