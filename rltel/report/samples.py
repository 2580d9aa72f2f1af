"""The report's samples section, read from a run's ``samples.jsonl``.

Per stream: the kept samples of the last step in range (``--until STEP`` chooses the step),
the lowest- and highest-reward sample first, then the rest by reward; and per step the
distribution of completion lengths (characters). Every text is HTML-escaped.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from pathlib import Path
from typing import Any

from rltel.report.runs import Filters, Run

SAMPLES_FILE = "samples.jsonl"
_META = ("step", "stream", "truncated")


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


def _lengths(rows: list[dict[str, Any]]) -> str:
    """Per step: count, min, median and max completion length of the kept samples."""
    by_step: dict[int, list[int]] = {}
    for row in rows:
        if isinstance(row.get("completion"), str):
            by_step.setdefault(row["step"], []).append(len(row["completion"]))
    if not by_step:
        return ""
    lines = "".join(
        f"<tr><td>{step}</td><td>{len(n)}</td><td>{min(n)}</td>"
        f"<td>{statistics.median(n):g}</td><td>{max(n)}</td></tr>"
        for step, n in sorted(by_step.items())
    )
    return (
        "<p>Completion length (characters) of the kept samples per step:</p>"
        "<table class='lengths'><tr><th>step</th><th>samples</th><th>min</th><th>median</th>"
        f"<th>max</th></tr>{lines}</table>"
    )


def _reward(row: dict[str, Any]) -> float | None:
    value = row.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _cell(value: Any) -> str:
    return "" if value is None else str(value)
