"""The dashboards' template variables, as Grafana 11.2 saves them.

Every panel, target and query variable reads ``${DS_PROMETHEUS}``: the data source variable
of :func:`datasource_variable`. Provisioned with this stack it holds the provisioned
Prometheus (``dashboards/grafana/provisioning/datasources/prometheus.yml``, uid
:data:`PROMETHEUS_UID`); imported into another Grafana, whose data sources lack that uid,
Grafana selects the first Prometheus data source it has, and the picker at the top of the
board switches to another.
"""

from __future__ import annotations

DATASOURCE_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": f"${{{DATASOURCE_INPUT}}}"}
"""Every panel, target and query variable reads the Prometheus the variable selects."""
PROMETHEUS_UID = "rltel-prometheus"
"""The uid of the stack's provisioned Prometheus data source."""

ALPHABETICAL = 1
"""``sort``: alphabetical, ascending (experiment and trial names)."""
NUMERICAL = 3
"""``sort``: by the first number in each value, ascending (layer ids: 10 after 9)."""
ALL = {"selected": True, "text": ["All"], "value": ["$__all"]}
"""``current`` of a multi-value variable saved with "All" selected."""
FIRST = {"selected": False, "text": "", "value": ""}
"""``current`` of a single-value variable saved with no value: Grafana selects the first
value its query returns when the board loads."""


def query_variable(
    name: str, label: str, metric: str, multi: bool = False, sort: int = ALPHABETICAL
) -> dict:
    """A template variable listing the values of ``label`` on ``metric``.

    Args:
        name: variable name, used as ``$name`` in queries.
        label: the Prometheus label whose values are offered.
        metric: a series selector that carries the label.
        multi: allow several values and "All" (matching any value); "All" is selected.
        sort: Grafana's sort of the values (:data:`ALPHABETICAL`, :data:`NUMERICAL`).
    """
    variable = {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": f"label_values({metric}, {label})", "refId": f"{name}-values"},
        "refresh": 2,
        "sort": sort,
        "multi": multi,
        "includeAll": multi,
        "current": dict(ALL) if multi else dict(FIRST),
        "options": [],
        "hide": 0,
        "skipUrlSync": False,
    }
    if multi:
        variable["allValue"] = ".*"
    return variable


def datasource_variable() -> dict:
    """The ``DS_PROMETHEUS`` variable: a Prometheus data source picker (see the module)."""
    return {
        "name": DATASOURCE_INPUT,
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "current": {"selected": False, "text": "Prometheus", "value": PROMETHEUS_UID},
        "options": [],
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "skipUrlSync": False,
    }


def label_values_selector(variable: dict) -> str:
    """The series selector of a query variable's ``label_values(selector, label)``."""
    query = variable["query"]["query"]
    return query[len("label_values(") : query.rindex(",")]
