"""Small builders for Grafana dashboard JSON (schema 39): panels, targets, layout.

Every builder returns plain dicts and lists, so a dashboard is data that ``json.dumps``
writes deterministically. Panels are laid out by :func:`dashboard` on a 24-column grid.
Each dashboard is complete as Grafana 11.2 saves it (its options from
:mod:`dashboards.panel_options`, its variables from :mod:`dashboards.variables`):
tests/dashboards/test_grafana_schema.py checks it against Grafana's own schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dashboards.panel_options import heatmap_options, stat_options, timeseries_options
from dashboards.variables import DATASOURCE, datasource_variable, label_values_selector

GRAFANA_VERSION = "11.2.0"
"""The Grafana the boards are written for: docker-compose.yml's image tag (a test keeps the
two equal, and the schema check installs this version's @grafana/schema)."""
SCHEMA_VERSION = 39
GRID_WIDTH = 24
THRESHOLD_COLORS = ("green", "orange", "red")
"""Below the first threshold, from the first, from the second: higher is worse."""
BUILTIN_ANNOTATION = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}
"""Grafana's own annotation query, which every dashboard it saves holds."""


TIME_SERIES = "time_series"
BUCKETS = "heatmap"
"""Target formats: series as they are, or cumulative ``le`` buckets that Grafana de-accumulates."""


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel; ``legend`` uses Grafana's ``{{label}}`` syntax.

    ``format`` is the Prometheus data source's: ``time_series`` hands the series over as
    they are; ``heatmap`` sorts them by ``le`` and subtracts each from the next, which is
    right only for cumulative histogram buckets.
    """

    expr: str
    legend: str = ""
    format: str = TIME_SERIES
    unit: str = ""
    """A unit other than the panel's: this target's series get it and an axis of their own
    on the right (one unit per axis)."""


@dataclass(frozen=True, slots=True)
class Panel:
    """A panel before layout: kind is ``timeseries``, ``heatmap``, ``stat`` or ``row``."""

    title: str
    kind: str
    queries: tuple[Query, ...] = ()
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: tuple[float, ...] = ()
    colors: tuple[str, ...] = THRESHOLD_COLORS
    """The colour below the first threshold, then from each threshold on."""
    interval: str = ""
    """Grafana's "Min interval" of the queries (the least ``$__interval``); empty: the data
    source's scrape interval."""
    options: dict[str, Any] = field(default_factory=dict)


def timeseries(title: str, *queries: Query, unit: str = "short", **kw: Any) -> Panel:
    """A time-series panel with one line per returned series."""
    return Panel(title, "timeseries", queries, unit, **kw)


def heatmap(title: str, query: Query, unit: str = "short", **kw: Any) -> Panel:
    """A heatmap with one row per series of ``query`` (per legend value), drawn as returned.

    The series go over as ``time_series`` (never de-accumulated) and the panel does not
    bucket them (``calculate: false``): each cell is the series' value at that time, rows
    sorted by their numeric legend and centred on it (``rowsFrame.layout: unknown``).
    """
    target = Query(query.expr, query.legend, TIME_SERIES)
    return Panel(title, "heatmap", (target,), unit, options=heatmap_options("unknown"), **kw)


def bucket_heatmap(title: str, query: Query, unit: str = "short", **kw: Any) -> Panel:
    """A heatmap of cumulative histogram buckets: ``query`` returns one series per ``le``.

    Grafana de-accumulates them (``format: heatmap``) and draws each bucket's count between
    the previous bound and its own (``rowsFrame.layout: le``).
    """
    target = Query(query.expr, query.legend or "{{le}}", BUCKETS)
    return Panel(title, "heatmap", (target,), unit, options=heatmap_options("le"), **kw)


def stat(title: str, query: Query, unit: str = "short", **kw: Any) -> Panel:
    """A single-value panel showing the last value."""
    return Panel(title, "stat", (query,), unit, width=kw.pop("width", 6), **kw)


def row(title: str) -> Panel:
    """A full-width row header that groups the panels after it."""
    return Panel(title, "row", width=GRID_WIDTH, height=1)


def _target(query: Query, index: int) -> dict:
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": query.expr,
        "format": query.format,
        "legendFormat": query.legend or "__auto",
        "range": True,
        "refId": _ref_id(index),
    }


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


def _thresholds(values: tuple[float, ...], colors: tuple[str, ...]) -> dict:
    """Grafana's absolute thresholds: ``colors[0]`` below ``values[0]``, then one per value."""
    if len(colors) < len(values) + 1:
        raise ValueError(f"{len(values)} thresholds need {len(values) + 1} colours: {colors}")
    steps = [{"color": colors[0], "value": None}]
    steps += [{"color": color, "value": value} for value, color in zip(values, colors[1:])]
    return {"mode": "absolute", "steps": steps}


def _overrides(panel: Panel) -> list[dict]:
    """A target with a unit of its own: that unit, on its own axis on the right."""
    return [
        {
            "matcher": {"id": "byFrameRefID", "options": _ref_id(i)},
            "properties": [
                {"id": "unit", "value": query.unit},
                {"id": "custom.axisPlacement", "value": "right"},
            ],
        }
        for i, query in enumerate(panel.queries)
        if query.unit and query.unit != panel.unit
    ]


def _options(panel: Panel) -> dict[str, Any]:
    """The kind's complete options, with the panel's own on top (a dict merged key by key)."""
    base = {"timeseries": timeseries_options, "stat": stat_options}.get(panel.kind, dict)()
    for key, value in panel.options.items():
        given = base.get(key)
        base[key] = {**given, **value} if isinstance(given, dict) else value
    return base


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
    if panel.kind == "row":
        return {"id": panel_id, "type": "row", "title": panel.title, "collapsed": False,
                "gridPos": grid, "panels": []}  # fmt: skip
    # Always written: without them Grafana applies its default (red from 80), which a stat
    # panel shows as its colour.
    defaults: dict[str, Any] = {
        "unit": panel.unit,
        "thresholds": _thresholds(panel.thresholds, panel.colors),
    }
    if panel.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
    if panel.kind == "timeseries" and panel.thresholds:
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    out = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": _overrides(panel)},
        "options": _options(panel),
        "pluginVersion": GRAFANA_VERSION,
        "targets": [_target(query, i) for i, query in enumerate(panel.queries)],
    }
    if panel.interval:
        out["interval"] = panel.interval
    return out


def dashboard(
    uid: str, title: str, panels: list[Panel], variables: list[dict], description: str = ""
) -> dict:
    """A complete dashboard: panels laid out left to right, wrapping at the grid width.

    Args:
        uid: stable dashboard uid (provisioning and links rely on it).
        title: dashboard title.
        panels: panels in reading order; a ``row`` starts a new line.
        variables: template variables from :func:`dashboards.variables.query_variable`
            (the data source variable comes first, added here).
        description: shown in the dashboard settings.
    """
    laid_out = []
    x = y = line_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        if panel.kind == "row" or x + panel.width > GRID_WIDTH:
            x, y, line_height = 0, y + line_height, 0
        laid_out.append(_panel_json(panel, panel_id, x, y))
        x += panel.width
        line_height = max(line_height, panel.height)
    return {
        "id": None,
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["rltel"],
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "liveNow": False,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        "weekStart": "",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "refresh": "30s",
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": [dict(BUILTIN_ANNOTATION)]},
        "links": [],
        "panels": laid_out,
    }


def expressions(board: dict) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets and variable queries."""
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [
        label_values_selector(variable)
        for variable in board["templating"]["list"]
        if variable["type"] == "query"
    ]
    return exprs
