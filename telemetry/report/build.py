"""Write a report directory: one PNG and one JSON (the plotted data) per figure, index.html.

``index.html`` embeds every PNG as a base64 data URI, so the one file works when opened
from disk or mailed; it also links the PNG and JSON files next to it.
"""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from telemetry.report.figures import FIGURES
from telemetry.report.panels import axes_data
from telemetry.report.runs import Filters, ReportInputError, Run


@dataclass(frozen=True, slots=True)
class Written:
    """One figure on disk and the panels in it that had no data."""

    name: str
    title: str
    png: Path
    data: Path
    absent: tuple[str, ...]


def build_report(runs: Sequence[Run], out: Path, filters: Filters | None = None) -> Path:
    """Draw every figure for ``runs`` into ``out``; returns the path of ``index.html``.

    Raises:
        ReportInputError: ``out`` cannot be created or written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    filters = filters or Filters()
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for spec in FIGURES:
            figure = spec.draw(runs)
            FigureCanvasAgg(figure)
            png, data_path = out / f"{spec.name}.png", out / f"{spec.name}.json"
            figure.savefig(png)
            data = {"figure": spec.name, "title": spec.title, **axes_data(figure)}
            data["runs"] = [run.label for run in runs]
            data_path.write_text(json.dumps(data, indent=1, allow_nan=False))
            missing = tuple(a["title"] for a in data["axes"] if a["absent"])
            written.append(Written(spec.name, spec.title, png, data_path, missing))
        index = out / "index.html"
        index.write_text(_html(runs, written, filters), encoding="utf-8")
    except OSError as exc:
        raise ReportInputError(f"cannot write the report to {str(out)!r}: {exc}") from exc
    return index


def _html(runs: Sequence[Run], written: Sequence[Written], filters: Filters) -> str:
    esc = html.escape
    rows = []
    for run in runs:
        span = run.steps()
        steps = f"{span[0]}-{span[1]}" if span else "none"
        experts = run.expert_source or "none"
        rows.append(
            f"<tr><td>{esc(run.label)}</td><td><code>{esc(str(run.path))}</code></td>"
            f"<td>{steps}</td><td>{len(run.scalars)}</td><td>{len(run.event_files)}</td>"
            f"<td>{esc(experts)}</td></tr>"
        )
    sections = []
    for w in written:
        encoded = base64.b64encode(w.png.read_bytes()).decode("ascii")
        note = f"<p class='absent'>No data for: {esc('; '.join(w.absent))}</p>" if w.absent else ""
        sections.append(
            f"<section id='{w.name}'><h2>{esc(w.title)}</h2>"
            f"<img alt='{esc(w.title)}' src='data:image/png;base64,{encoded}'>{note}"
            f"<p class='files'><a href='{w.png.name}'>{w.png.name}</a> · "
            f"<a href='{w.data.name}'>{w.data.name}</a> (plotted data)</p></section>"
        )
    toc = " · ".join(f"<a href='#{w.name}'>{esc(w.title)}</a>" for w in written)
    filtered = (
        f"<p>Filters: <code>{esc(filters.describe())}</code></p>" if filters.describe() else ""
    )
    title = "rltel report: " + ", ".join(run.label for run in runs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; max-width: 1300px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; }}
img {{ max-width: 100%; border: 1px solid #eee; }} .absent {{ color: #a60; }}
.files {{ font-size: 0.9em; color: #555; }}
</style></head><body>
<h1>{esc(title)}</h1>
<p>Generated {time.strftime("%Y-%m-%d %H:%M:%S")} by <code>rltel report</code> from the
runs' TensorBoard event files. x axes are the training global step.</p>{filtered}
<table><tr><th>run</th><th>directory</th><th>steps</th><th>scalar tags</th>
<th>event files</th><th>per-expert MoE loads</th></tr>
{"".join(rows)}</table>
<p>{toc}</p>
{"".join(sections)}
</body></html>
"""
