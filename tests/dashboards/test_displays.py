"""The boards, read as Grafana shows them: colours, drawn cells, windows, axes, sorting, docs.

Each rule below is Grafana's, written from its code: a threshold's colour
(``getActiveThreshold``: the last step whose value is at most the field's, the first step
from minus infinity), the heatmap cells it draws (:func:`tests.dashboards.grafana_model.drawn`),
one y axis per unit in a time-series panel, ``$__interval`` as the query step. Units are
checked against Grafana's unit list by tests/dashboards/test_grafana_schema.py and the
"all engines" sums in a real Prometheus by test_panel_values.py.
"""

from __future__ import annotations

import json
import math
import re

import yaml

from dashboards import build
from dashboards import catalog as c
from dashboards.alerts import (
    KL_K3_CRITICAL,
    KL_K3_WARNING,
    MAX_OVER_IDEAL_CRITICAL,
    MAX_OVER_IDEAL_WARNING,
    STALENESS_WARNING,
)
from dashboards.engines_board import KV_CACHE_WARNING
from exporters.prometheus.naming import sample_names
from tests.dashboards import grafana_model
from tests.dashboards.test_dashboards import _all_expressions, metric_names

BOARDS = {n: json.loads((build.GRAFANA_DIR / f"{n}.json").read_text()) for n in build.BOARDS}
PANELS = [(n, p) for n, board in BOARDS.items() for p in board["panels"] if p["type"] != "row"]
PROMETHEUS = build.HERE / "prometheus" / "prometheus.yml"
METRICS_DOC = build.HERE.parent / "docs" / "metrics.md"
BYTES_UNITS = {"bytes", "decbytes", "kbytes", "mbytes", "gbytes", "deckbytes", "decmbytes"}
ALPHABETICAL_SORTS = {1, 2, 5, 6}
"""Grafana's ``VariableSort``: alphabetical (asc, desc), case-insensitive (asc, desc)."""

MOE = {1.0: "green", MAX_OVER_IDEAL_WARNING: "orange", MAX_OVER_IDEAL_CRITICAL: "red"}
KL = {0.0: "green", KL_K3_WARNING: "orange", KL_K3_CRITICAL: "red"}
COLOURS = {
    ("pipeline", "Collector up"): {1.0: "green", 0.0: "red"},
    ("pipeline", "Remote write degraded"): {0.0: "green", 1.0: "red"},
    ("moe_balance", "Worst layer max_over_ideal"): MOE,
    ("moe_balance", "max_over_ideal per layer"): MOE,
    ("rl_health", "KL estimators (last step)"): KL,
    ("rl_health", "KL k3, token-weighted over the rate window"): KL,
    ("rl_health", "Sample staleness (versions)"): {1.0: "green", STALENESS_WARNING: "orange"},
    ("engines", "KV cache usage"): {0.5: "green", KV_CACHE_WARNING: "orange"},
}
"""Panels with thresholds -> value -> the colour it must show (healthy is green)."""


def threshold_color(thresholds: dict, value: float) -> str:
    """Grafana's ``getActiveThreshold`` for absolute thresholds."""
    steps = thresholds["steps"]
    active = steps[0]
    for step in steps:
        if value >= (-math.inf if step["value"] is None else step["value"]):
            active = step
        else:
            break
    return active["color"]


def test_threshold_colours_are_healthy_green():
    thresholded = {
        (name, panel["title"]): panel["fieldConfig"]["defaults"]["thresholds"]
        for name, panel in PANELS
        if len(panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])) > 1
    }
    assert set(thresholded) == set(COLOURS)
    for where, colours in COLOURS.items():
        shown = {value: threshold_color(thresholded[where], value) for value in colours}
        assert shown == colours, where


def test_threshold_rule_reads_steps_in_order():
    thresholds = {"steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}]}
    assert [threshold_color(thresholds, v) for v in (-5, 0, 0.999, 1, 7)] == [
        "red", "red", "red", "green", "green"
    ]  # fmt: skip


def test_heatmaps_draw_zeros():
    """An idle expert, a layer with no routing, an empty bucket: drawn, not missing."""
    heatmaps = [(n, p) for n, p in PANELS if p["type"] == "heatmap"]
    assert len(heatmaps) == 3
    for name, panel in heatmaps:
        for value in (0.0, 1e-12, 0.5, 250.0):
            assert grafana_model.drawn(value, panel["options"]), (name, panel["title"], value)
        assert not grafana_model.drawn(None, panel["options"])
    assert not grafana_model.drawn(0.0, {})  # Grafana's default hides zeros


def _seconds(duration: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration).groups()
    return float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def test_histogram_windows_equal_the_step():
    """A bucket heatmap's cells count each step's window: ``$__interval``, Grafana's step, so
    no observation is counted in two cells; the step holds at least two scrapes."""
    scrape = _seconds(yaml.safe_load(PROMETHEUS.read_text())["global"]["scrape_interval"])
    buckets = [(n, p, t) for n, p in PANELS for t in p["targets"] if t["format"] == "heatmap"]
    assert buckets
    for name, panel, target in buckets:
        windows = re.findall(r"\[([^\]]+)\]", target["expr"])
        assert windows and set(windows) == {"$__interval"}, (name, panel["title"], windows)
        assert _seconds(panel["interval"]) >= 2 * scrape, (name, panel["title"])


def _quantity(expr: str) -> str:
    """What a target's series count: bytes, a per-second rate, or a plain value."""
    names, _ = metric_names(expr)
    if any(re.search(r"_bytes(_|$)", n) for n in names):
        return "bytes"
    if "rate(" in expr and "/" not in expr and "histogram_quantile" not in expr:
        return "per second"
    return "value"


def _target_units(panel: dict) -> dict[str, str]:
    """refId -> the unit its series are drawn in (field overrides by query applied)."""
    units = {t["refId"]: panel["fieldConfig"]["defaults"].get("unit", "") for t in panel["targets"]}
    for override in panel["fieldConfig"]["overrides"]:
        assert override["matcher"]["id"] == "byFrameRefID", panel["title"]
        for prop in override["properties"]:
            if prop["id"] == "unit":
                units[override["matcher"]["options"]] = prop["value"]
    return units


def test_one_quantity_per_axis():
    """Grafana draws one y axis per unit: series sharing a unit must count the same thing,
    and bytes are drawn in a bytes unit."""
    for name, panel in PANELS:
        if panel["type"] != "timeseries":
            continue
        units = _target_units(panel)
        by_unit: dict[str, set[str]] = {}
        for target in panel["targets"]:
            quantity = _quantity(target["expr"])
            by_unit.setdefault(units[target["refId"]], set()).add(quantity)
            assert (quantity == "bytes") == (units[target["refId"]] in BYTES_UNITS), (
                name, panel["title"], target["refId"]
            )  # fmt: skip
        assert all(len(q) == 1 for q in by_unit.values()), (name, panel["title"], by_unit)


def test_run_variables_sort_alphabetically():
    for name, board in BOARDS.items():
        for variable in board["templating"]["list"]:
            if variable["name"] in ("experiment", "trial"):
                assert variable["sort"] in ALPHABETICAL_SORTS, (name, variable["name"])


def test_metrics_doc_lists_every_series_the_boards_and_alerts_read():
    """docs/metrics.md names each series a query reads: a catalogue metric's row, or the
    series itself in the table of the telemetry path's and the engines' series."""
    doc = METRICS_DOC.read_text()
    catalog = {s: m for m in c.ALL for s in sample_names(m.name, m.kind)}
    missing = set()
    for where, expr in _all_expressions().items():
        names, patterns = metric_names(expr)
        for series in names:
            listed = f"`{catalog[series].name}`" if series in catalog else f"`{series}`"
            if listed not in doc:
                missing.add((where, series))
        for pattern in patterns:
            matched = [m for s, m in catalog.items() if re.fullmatch(pattern, s)]
            if not any(f"`{m.name}`" in doc for m in matched):
                missing.add((where, pattern))
    assert not missing, sorted(missing)
