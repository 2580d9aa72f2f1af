"""The MoE heatmaps draw the exported values: producers -> sink -> real Prometheus -> Grafana.

The real MoE balance producer exports three layers whose max/ideal values are not sorted by
layer (2.133, 2.1, 2.5). A real Prometheus scrapes the real sink; each heatmap panel's own
query runs as a range query; :mod:`tests.dashboards.grafana_model` applies what Grafana's
Prometheus data source and heatmap panel do for the panel's target format and options. Every
cell must equal the exported value of its row. The same data through ``format: heatmap``
(the de-accumulation meant for ``le`` buckets) must not, which shows the check can fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from dashboards import build
from dashboards import catalog as c
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from tests.dashboards import grafana_model as grafana
from tests.dashboards import servers
from tests.dashboards.producers import moe_points, snapshot

ROUTING = {
    0: ([0, 0, *range(1, 14)], 16),  # max/ideal = 2 / (15 / 16) = 2.1333...
    1: ([0, 0, 0, 1, 2, 3, 4, 5, 6, 6], 7),  # 3 / (10 / 7) = 2.1
    2: ([0, 0, 0, 0, 0, 1, 2, 3], 4),  # 5 / (8 / 4) = 2.5
}
LAYER = "0"
VARIABLES = {"$experiment": ".*", "$trial": ".*", "$layer": LAYER}
MOE = json.loads((build.GRAFANA_DIR / "moe_balance.json").read_text())
HEATMAPS = {p["title"]: p for p in MOE["panels"] if p["type"] == "heatmap"}


def _expected() -> dict[str, dict[str, float]]:
    """Panel title -> row name -> the value the producer exported."""
    points = moe_points(ROUTING)
    ratio = {
        str(dict(p.attributes)["layer"]): p.value
        for p in points
        if p.metric == c.MAX_OVER_IDEAL.metric
    }
    load = {
        str(dict(p.attributes)["expert"]): p.value
        for p in points
        if p.metric == c.LOAD_PERCENT.metric and str(dict(p.attributes)["layer"]) == LAYER
    }
    assert sorted(ratio.values()) != list(ratio.values())  # rows not sorted by value
    return {
        "max_over_ideal: layer x time": ratio,
        "Expert load % (layer $layer): expert x time": load,
    }


EXPECTED = _expected()


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Iterator[dict[str, list[dict]]]:
    """Panel title -> the range query result of its target, from a real Prometheus."""
    tmp = tmp_path_factory.mktemp("heatmaps")
    sink = PrometheusSink(PrometheusConfig(enabled=True, port=0))
    rules = tmp / "rules.yml"
    rules.write_text("groups: []\n")
    try:
        start = time.time() - 1
        assert sink.export(snapshot(moe_points(ROUTING), "t1")).value == "success"
        config = servers.prometheus_config(f"127.0.0.1:{sink.port}", None, rules, fast=True)
        with servers.prometheus(tmp, config) as prometheus:
            deadline = time.monotonic() + 30
            while True:
                data = servers.api(prometheus, "query", query=f"count({c.MAX_OVER_IDEAL.name})")
                if data["result"] and data["result"][0]["value"][1] == str(len(ROUTING)):
                    break
                assert time.monotonic() < deadline, "Prometheus never scraped the sink"
                time.sleep(0.2)
            time.sleep(3)  # a few scrapes: several columns
            end = time.time()
            out = {}
            for title, panel in HEATMAPS.items():
                (target,) = panel["targets"]
                expr = target["expr"]
                for variable, value in VARIABLES.items():
                    expr = expr.replace(variable, value)
                data = servers.api(
                    prometheus, "query_range", query=expr, start=start, end=end, step=1
                )
                out[title] = data["result"]
            yield out
    finally:
        sink.shutdown()


def _cells(panel: dict, result: list[dict], fmt: str, group_by_labels: bool = False):
    (target,) = panel["targets"]
    frames = grafana.series_frames(result, target["legendFormat"])
    return grafana.datasource(frames, fmt, group_by_labels), panel["options"]


def test_both_moe_heatmaps_are_checked():
    assert set(HEATMAPS) == set(EXPECTED)


@pytest.mark.parametrize("title", sorted(EXPECTED))
def test_heatmap_cells_equal_the_exported_values(results, title):
    panel = HEATMAPS[title]
    (target,) = panel["targets"]
    frames, options = _cells(panel, results[title], target["format"])
    cells = grafana.panel_cells(frames, options)
    expected = EXPECTED[title]
    times = sorted({t for t, _ in cells})
    assert len(times) >= 3, "too few columns to compare"
    for (when, row), value in cells.items():
        assert value == expected[row], (title, when, row, value, expected[row])
    assert {row for _, row in cells} == set(expected)
    assert len(cells) == len(times) * len(expected)  # no empty cell
    # rows bottom to top in numeric order of layer / expert id (10 after 9)
    assert grafana.row_order(frames, options) == sorted(expected, key=int)


@pytest.mark.parametrize("group_by_labels", [False, True], ids=["sort-subtract", "grouped"])
def test_bucket_format_would_draw_wrong_values(results, group_by_labels):
    """``format: heatmap`` on these series (the old dashboards) draws other numbers."""
    title = "max_over_ideal: layer x time"
    panel = HEATMAPS[title]
    frames, options = _cells(panel, results[title], "heatmap", group_by_labels)
    cells = grafana.panel_cells(frames, options)
    drawn = {row: value for (_, row), value in cells.items()}
    expected = EXPECTED[title]
    assert drawn != expected
    if group_by_labels:  # one frame per layer; the panel keeps only the last one
        assert len(drawn) == 1
    else:  # sorted by layer, each minus the one below, clamped at 0
        assert drawn["0"] == expected["0"]
        assert drawn["1"] == 0.0  # 2.1 - 2.133 < 0
        assert drawn["2"] == pytest.approx(expected["2"] - expected["1"])
