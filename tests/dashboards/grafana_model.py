"""What a Grafana heatmap panel draws from a Prometheus range query, written from Grafana's code.

Two stages, as Grafana runs them:

1. The Prometheus data source turns each returned series into a frame (time, value; the
   display name is the rendered ``legendFormat``). For a target with ``format: heatmap``
   it then treats the frames as cumulative ``le`` buckets: sorts them by their numeric
   name, subtracts each frame from the next one up and clamps results below 1e-9 to 0
   (``transformToHistogramOverTime`` in ``result_transformer.ts``), and merges them into
   one "heatmap rows" frame. Newer versions first group a query's frames by their label
   values (all but ``le``) and do this per group. ``format: time_series`` frames pass as
   they are.
2. The heatmap panel with ``calculate: false`` (``prepareHeatmapData`` in the panel's
   ``fields.ts``) takes a "heatmap rows" frame as it is (the last one, if several);
   otherwise it sorts plain frames by numeric display name (when all are numeric) and
   joins them on time. Each value field is one row and each time one column; a cell holds
   the field's value (``rowsToCellsHeatmap``).

Only what decides the cell values, and which cells are drawn (:func:`drawn`), is modelled:
no colours, units or exemplars.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

Cells = dict[tuple[int, str], float | None]
"""(time in ms, row display name) -> the value the cell shows."""

_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass
class Frame:
    """One frame: a time column and named value rows (one row unless merged)."""

    times: list[int]
    rows: dict[str, list[float | None]]
    labels: dict[str, str]
    heatmap_rows: bool = False


def _sample(value: str) -> float:
    """Grafana's ``parseSampleValue``: +Inf/-Inf/Inf by name, else a float."""
    if re.fullmatch(r"[+-]?inf(inity)?", value, re.I):
        return -math.inf if value.startswith("-") else math.inf
    return float(value)


def _numeric(name: str) -> float:
    try:
        return _sample(name)
    except ValueError:
        return math.nan


def series_frames(matrix: list[dict], legend: str) -> list[Frame]:
    """The data source's frames of a ``query_range`` matrix result, in answer order."""
    frames = []
    for series in matrix:
        labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
        name = _LEGEND.sub(lambda m, labels=labels: labels.get(m.group(1), ""), legend)
        times = [round(float(t) * 1000) for t, _ in series["values"]]
        frames.append(Frame(times, {name: [_sample(v) for _, v in series["values"]]}, labels))
    return frames


def _deaccumulate(frames: list[Frame]) -> Frame:
    frames = sorted(frames, key=lambda f: _numeric(next(iter(f.rows))))
    values = [list(next(iter(f.rows.values()))) for f in frames]
    for i in range(len(values) - 1, 0, -1):
        below = values[i - 1]
        for j, top in enumerate(values[i]):
            result = (top or 0.0) - (below[j] or 0.0)
            values[i][j] = 0.0 if result < 1e-9 else result
    rows = {next(iter(f.rows)): v for f, v in zip(frames, values, strict=True)}
    return Frame(frames[0].times, rows, frames[0].labels, heatmap_rows=True)


def datasource(frames: list[Frame], fmt: str, group_by_labels: bool = False) -> list[Frame]:
    """Stage 1: the frames the panel receives for one target of format ``fmt``.

    Args:
        frames: :func:`series_frames` of the target's result.
        fmt: the target's ``format``.
        group_by_labels: the newer ``format: heatmap`` code, which de-accumulates per group
            of frames with equal label values (``le`` excluded).
    """
    if fmt != "heatmap" or not frames:
        return frames
    if not group_by_labels:
        return [_deaccumulate(frames)]
    groups: dict[str, list[Frame]] = {}
    for frame in frames:
        key = ",".join(v for k, v in frame.labels.items() if k != "le")
        groups.setdefault(key, []).append(frame)
    return [_deaccumulate(group) for group in groups.values()]


def _outer_join(frames: list[Frame]) -> Frame:
    times = sorted({t for f in frames for t in f.times})
    rows: dict[str, list[float | None]] = {}
    for frame in frames:
        index = {t: i for i, t in enumerate(frame.times)}
        for name, values in frame.rows.items():
            rows[name] = [values[index[t]] if t in index else None for t in times]
    return Frame(times, rows, {})


def panel_cells(frames: list[Frame], options: dict) -> Cells:
    """Stage 2: the cells of a heatmap panel with ``options`` drawing ``frames``.

    Raises:
        ValueError: the panel calculates its own buckets (``calculate: true``).
    """
    if options.get("calculate"):
        raise ValueError("only calculate: false is modelled")
    rows_frame = None
    for frame in frames:
        if frame.heatmap_rows:
            rows_frame = frame  # the last "heatmap rows" frame wins
    if rows_frame is None:
        names = [next(iter(f.rows)) for f in frames]
        if len(frames) > 1 and not any(math.isnan(_numeric(n)) for n in names):
            frames = sorted(frames, key=lambda f: _numeric(next(iter(f.rows))))
        rows_frame = _outer_join(frames)
    return {
        (time, name): values[i]
        for name, values in rows_frame.rows.items()
        for i, time in enumerate(rows_frame.times)
    }


def row_order(frames: list[Frame], options: dict) -> list[str]:
    """The panel's rows from bottom to top."""
    seen: dict[str, None] = {}
    for _, name in panel_cells(frames, options):
        seen.setdefault(name)
    return list(seen)


HEATMAP_FILTER = {"le": 1e-9}
"""The heatmap panel's default ``filterValues`` (``defaultOptions`` of @grafana/schema's
``HeatmapPanelCfg_types.gen``, 11.2.0), merged under a board's own ``filterValues`` when the
panel loads its options."""


def drawn(value: float | None, options: dict) -> bool:
    """Whether the heatmap panel draws a cell holding ``value``.

    ``heatmapPathsDense`` in the panel's ``utils.ts`` fills a cell only when its count is not
    null and ``hideLE < count < hideGE`` (``filterValues.le`` and ``.ge``, open bounds
    when unset).
    """
    limits = {**HEATMAP_FILTER, **options.get("filterValues", {})}
    low, high = limits.get("le", -math.inf), limits.get("ge", math.inf)
    return value is not None and low < value < high
