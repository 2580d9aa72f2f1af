"""Each panel kind's ``options`` as Grafana 11.2 saves them: every key its schema requires.

The keys and values are those of ``@grafana/schema``'s generated ``Options`` of the
``timeseries``, ``stat`` and ``heatmap`` panels (tests/dashboards/test_grafana_schema.py
checks every board against them), with Grafana's defaults where rltel has no reason to
differ.
"""

from __future__ import annotations

from typing import Any

SHOW_ZEROS = {"le": -1e-9}
"""The heatmaps' ``filterValues``: Grafana hides a cell when its value is ``<= le`` (default
``1e-9``, which hides zeros). The boards' heatmap values are never negative and a zero is a
value (an idle expert, a layer without routing, an empty bucket), not missing data, so only
values below zero would be hidden."""


def timeseries_options(legend_placement: str = "bottom") -> dict[str, Any]:
    """A legend listing the series (no calculations) and a single-series tooltip."""
    return {
        "legend": {
            "calcs": [],
            "displayMode": "list",
            "placement": legend_placement,
            "showLegend": True,
        },
        "tooltip": {"mode": "single", "sort": "none"},
    }


def stat_options() -> dict[str, Any]:
    """The last non-null value of each series, coloured by the thresholds, with a sparkline."""
    return {
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "percentChangeColorMode": "standard",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "showPercentChange": False,
        "textMode": "auto",
        "wideLayout": True,
    }


def heatmap_options(layout: str) -> dict[str, Any]:
    """A heatmap drawing its rows as given (``calculate: false``), zeros shown.

    Args:
        layout: ``rowsFrame.layout``: ``le`` for de-accumulated buckets, ``unknown`` for
            rows centred on their numeric names.
    """
    return {
        "calculate": False,
        "cellGap": 1,
        "cellValues": {},
        "color": {
            "exponent": 0.5,
            "fill": "dark-orange",
            "mode": "scheme",
            "reverse": False,
            "scale": "exponential",
            "scheme": "Turbo",
            "steps": 64,
        },
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": dict(SHOW_ZEROS),
        "legend": {"show": True},
        "rowsFrame": {"layout": layout},
        "selectionMode": "x",
        "showValue": "auto",
        "tooltip": {"mode": "single", "showColorScale": True, "yHistogram": False},
        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": "short"},
    }
