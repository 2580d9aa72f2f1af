"""Small builders for Grafana dashboard JSON (schema 39): panels, targets, variables.

Every builder returns plain dicts and lists, so a dashboard is data that ``json.dumps``
writes deterministically. Panels are laid out by :func:`dashboard` on a 24-column grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASOURCE_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": f"${{{DATASOURCE_INPUT}}}"}
"""Every panel, target and query variable reads the Prometheus the dashboard was given."""
GRAFANA_VERSION = "11.2.0"
SCHEMA_VERSION = 39
GRID_WIDTH = 24


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
    return Panel(title, "heatmap", (target,), unit, options=_heatmap_options("unknown"), **kw)


def bucket_heatmap(title: str, query: Query, unit: str = "short", **kw: Any) -> Panel:
    """A heatmap of cumulative histogram buckets: ``query`` returns one series per ``le``.

    Grafana de-accumulates them (``format: heatmap``) and draws each bucket's count between
    the previous bound and its own (``rowsFrame.layout: le``).
    """
    target = Query(query.expr, query.legend or "{{le}}", BUCKETS)
    return Panel(title, "heatmap", (target,), unit, options=_heatmap_options("le"), **kw)


def _heatmap_options(layout: str) -> dict[str, Any]:
    return {
        "calculate": False,
        "rowsFrame": {"layout": layout},
        "yAxis": {"unit": "short", "axisPlacement": "left"},
        "color": {"mode": "scheme", "scheme": "Turbo", "steps": 64},
        "cellGap": 1,
        "cellValues": {},
        "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
        "legend": {"show": True},
    }


def stat(title: str, query: Query, unit: str = "short", **kw: Any) -> Panel:
    """A single-value panel showing the last value."""
    return Panel(title, "stat", (query,), unit, width=kw.pop("width", 6), **kw)


def row(title: str) -> Panel:
    """A full-width row header that groups the panels after it."""
    return Panel(title, "row", width=GRID_WIDTH, height=1)


def query_variable(name: str, label: str, metric: str, multi: bool = False) -> dict:
    """A template variable listing the values of ``label`` on ``metric``.

    Args:
        name: variable name, used as ``$name`` in queries.
        label: the Prometheus label whose values are offered.
        metric: a series selector that carries the label.
        multi: allow several values (and "All", matching any value).
    """
    query = f"label_values({metric}, {label})"
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "definition": query,
        "refresh": 2,
        "sort": 3,
        "multi": multi,
        "includeAll": multi,
        "allValue": ".*" if multi else None,
        "current": {},
        "hide": 0,
    }


def datasource_variable() -> dict:
    """The ``DS_PROMETHEUS`` variable: a Prometheus data source picker.

    Importing a dashboard through the UI replaces ``${DS_PROMETHEUS}`` with the data source
    chosen for the ``__inputs`` entry; a provisioned file is not rewritten, and there the
    variable resolves it (default: the default Prometheus data source).
    """
    return {
        "name": DATASOURCE_INPUT,
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
    }


def _target(query: Query, index: int) -> dict:
    target = {
        "datasource": DATASOURCE,
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": True,
        "refId": chr(ord("A") + index),
    }
    target["format"] = query.format
    return target


def _thresholds(values: tuple[float, ...]) -> dict:
    colors = ("green", "orange", "red")
    steps = [{"color": "green", "value": None}]
    steps += [
        {"color": colors[min(i + 1, len(colors) - 1)], "value": value}
        for i, value in enumerate(values)
    ]
    return {"mode": "absolute", "steps": steps}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
    if panel.kind == "row":
        return {"id": panel_id, "type": "row", "title": panel.title, "collapsed": False,
                "gridPos": grid, "panels": []}  # fmt: skip
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.thresholds:
        defaults["thresholds"] = _thresholds(panel.thresholds)
    if panel.kind == "timeseries" and panel.thresholds:
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    options = dict(panel.options)
    if panel.kind == "timeseries":
        options = {"legend": {"displayMode": "list", "placement": "bottom"}, **options}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": grid,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [_target(query, i) for i, query in enumerate(panel.queries)],
    }


def dashboard(
    uid: str, title: str, panels: list[Panel], variables: list[dict], description: str = ""
) -> dict:
    """A complete dashboard: panels laid out left to right, wrapping at the grid width.

    Args:
        uid: stable dashboard uid (provisioning and links rely on it).
        title: dashboard title.
        panels: panels in reading order; a ``row`` starts a new line.
        variables: template variables from :func:`query_variable`.
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
    kinds = sorted({panel.kind for panel in panels if panel.kind != "row"})
    return {
        "__inputs": [
            {
                "name": DATASOURCE_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes the rltel collector",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *({"type": "panel", "id": kind, "name": kind, "version": ""} for kind in kinds),
        ],
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["rltel"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": []},
        "links": [],
        "panels": laid_out,
    }


def expressions(board: dict) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets and variable queries."""
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        definition = variable["definition"]
        exprs.append(definition[len("label_values(") : definition.rindex(",")])
    return exprs
