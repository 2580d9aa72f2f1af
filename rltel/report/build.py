"""Write a report directory: one PNG and one JSON (the plotted data) per figure, index.html.

``index.html`` embeds every PNG as a base64 data URI, so the one file works when opened
from disk or mailed; it also links the PNG and JSON files next to it. Panels whose series are
all zero are not drawn: one line under their figure names them (a figure of only such panels
is that line alone, without a PNG).
"""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rltel.report.figure_specs import FIGURES, FigureSpec
from rltel.report.panels import Drawn, axes_data
from rltel.report.runs import Filters, ReportInputError, Run
from rltel.report.samples import LENGTHS_FIGURE, LENGTHS_TITLE, draw_lengths, samples_html
from rltel.report.timeline import TIMELINE, draw_timeline, has_traces

PAGE_WIDTH_PX = 1300  # the page's widest content: figures (at most 1240 px) show at 1:1


@dataclass(frozen=True, slots=True)
class Written:
    """One figure on disk (no PNG when all its panels were zero), its panels without data,
    and its all-zero panels, described."""

    name: str
    title: str
    png: Path | None
    data: Path
    absent: tuple[str, ...]
    zero: tuple[str, ...]


def build_report(runs: Sequence[Run], out: Path, filters: Filters | None = None) -> Path:
    """Draw every figure for ``runs`` into ``out``; returns the path of ``index.html``.

    Raises:
        ReportInputError: ``out`` cannot be created or written.
    """
    filters = filters or Filters()
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = [write_figure(spec, spec.draw(runs), runs, out) for spec in FIGURES]
        lengths = draw_lengths(runs, filters)  # beside the samples tables; none without samples
        if lengths.figure is not None:
            spec = FigureSpec(LENGTHS_FIGURE, LENGTHS_TITLE, lambda _: lengths)
            written.append(write_figure(spec, lengths, runs, out))
        if has_traces(runs):  # timeline.png from trace.json or the per-rank trace files
            spec = FigureSpec(TIMELINE, "Timeline", lambda shown: draw_timeline(shown, filters))
            written.append(write_figure(spec, spec.draw(runs), runs, out))
        index = out / "index.html"
        index.write_text(_html(runs, written, filters), encoding="utf-8")
    except OSError as exc:
        raise ReportInputError(f"cannot write the report to {str(out)!r}: {exc}") from exc
    return index


def write_figure(spec: FigureSpec, drawn: Drawn, runs: Sequence[Run], out: Path) -> Written:
    """Save the PNG (or remove a stale one when nothing was drawn) and the plotted data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    png, data_path = out / f"{spec.name}.png", out / f"{spec.name}.json"
    data = {"figure": spec.name, "title": spec.title, "axes": []}
    if drawn.figure is None:
        png.unlink(missing_ok=True)
    else:
        FigureCanvasAgg(drawn.figure)
        drawn.figure.savefig(png)
        data.update(axes_data(drawn.figure))
    data["zero"] = [{"title": z.title, "series": list(z.series)} for z in drawn.zero]
    data["runs"] = [run.label for run in runs]
    data_path.write_text(json.dumps(data, indent=1, allow_nan=False))
    missing = tuple(a["title"] for a in data["axes"] if a["absent"])
    zero = tuple(z.describe() for z in drawn.zero)
    return Written(spec.name, spec.title, png if drawn.figure else None, data_path, missing, zero)


def _section(w: Written) -> str:
    """A figure's section: the embedded PNG, the lines on absent and all-zero panels, links."""
    esc = html.escape
    image, files = "", ""
    if w.png is not None:
        encoded = base64.b64encode(w.png.read_bytes()).decode("ascii")
        image = f"<img alt='{esc(w.title)}' src='data:image/png;base64,{encoded}'>"
        files = f"<a href='{w.png.name}'>{w.png.name}</a> · "
    absent = f"<p class='absent'>No data for: {esc('; '.join(w.absent))}</p>" if w.absent else ""
    zero = (
        f"<p class='zero'>All zero at every step (not drawn): {esc('; '.join(w.zero))}</p>"
        if w.zero
        else ""
    )
    return (
        f"<section id='{w.name}'><h2>{esc(w.title)}</h2>{image}{absent}{zero}"
        f"<p class='files'>{files}<a href='{w.data.name}'>{w.data.name}</a> (plotted data)</p>"
        "</section>"
    )


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
    sections = [_section(w) for w in written]
    sections += [samples_html(run, filters) for run in runs]  # empty without samples.jsonl
    toc = " · ".join(f"<a href='#{w.name}'>{esc(w.title)}</a>" for w in written)
    filtered = (
        f"<p>Filters: <code>{esc(filters.describe())}</code></p>" if filters.describe() else ""
    )
    title = "rltel report: " + ", ".join(run.label for run in runs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; max-width: {PAGE_WIDTH_PX}px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 3px 8px; }}
img {{ max-width: 100%; border: 1px solid #eee; }} .absent, .zero {{ color: #a60; }}
.files {{ font-size: 0.9em; color: #555; }}
td.text {{ white-space: pre-wrap; font-family: monospace; max-width: 40em; }}
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
