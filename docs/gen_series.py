"""docs/metrics.md, its last section: the series the dashboards read that no producer emits.

The telemetry path's own series (the collector's, its sinks', the senders' heartbeat),
Prometheus's ``up`` and the rollout engines' series (vLLM's and SGLang's own names, as the
scrape receiver reads them): each series one of those families registers, as Prometheus
names it, listed when a panel or an alert rule reads it, with the panels and rules that do.
``python -m docs.gen`` loads this file by path and appends the section to the metrics page.
"""

from __future__ import annotations

from types import ModuleType


def _families() -> list[tuple[str, str, str]]:
    """(family, kind, where it comes from) of every series source besides the catalogue;
    a counter family is named without ``_total``."""
    from collector.scrape import ScrapeHealth
    from collector.scrape.engine_figures import (
        AVERAGED,
        HIT_RATE_GAUGES,
        HIT_RATIOS,
        LATENCIES,
        RATES,
        SUMMED,
    )
    from collector.selfmetrics import DECLARED as COLLECTOR
    from exporters.prometheus import SELF_METRICS
    from exporters.prometheus.families import declared
    from exporters.remote_write.health import LinkHealth
    from telemetry.heartbeat import HeartbeatCollector

    def strip(name: str, kind: str) -> str:
        return name.removesuffix("_total") if kind == "counter" else name

    out = [("up", "gauge", "Prometheus (each scrape target)")]
    out += [(family.name, family.kind, "collector") for family in COLLECTOR]
    remote_write = declared(LinkHealth("", int))
    out += [(n, k, "collector's remote-write sink") for n, k in remote_write.items()]
    out += [(n, k, "collector's scrape receiver") for n, k in declared(ScrapeHealth()).items()]
    out += [(strip(n, k), k, "Prometheus sink") for n, k in SELF_METRICS.items()]
    out += [(n, k, "heartbeat (rank 0)") for n, k in declared(HeartbeatCollector(tuple)).items()]
    engine = [(name, "gauge") for group in SUMMED.values() for name in group]
    engine += [(name, "gauge") for group in AVERAGED.values() for name in group]
    engine += [(name, "gauge") for name in HIT_RATE_GAUGES]
    engine += [(name, "counter") for group in RATES.values() for name in group]
    engine += [(name, "counter") for pair in HIT_RATIOS for name in pair]
    engine += [(name, "histogram") for group in LATENCIES.values() for name in group]
    out += [(n, k, "vLLM" if n.startswith("vllm:") else "SGLang") for n, k in engine]
    return out


def render_series(page: ModuleType) -> str:
    """The section, from the metrics page module's queries and its ``reading`` rule."""
    from exporters.prometheus.naming import sample_names

    panels = page.panel_queries()
    alert_exprs = [(rule["alert"], rule["expr"]) for rule in page.alert_rules()]
    lines = [
        "",
        "## Other series the dashboards and alert rules read",
        "",
        "The telemetry path's own series and the rollout engines' (vLLM's and SGLang's own",
        "names, which reach Prometheus as the engines serve them), each with the panels and",
        "alert rules that read it.",
        "",
        "| Prometheus series | type | from | panels | alerts |",
        "|---|---|---|---|---|",
    ]
    seen = set()
    for family, kind, source in _families():
        for series in sample_names(f"{family}_total" if kind == "counter" else family, kind):
            used, fired = page.reading([series], panels), page.reading([series], alert_exprs)
            if series in seen or not (used or fired):
                continue
            seen.add(series)
            cells = [f"`{series}`", kind, source, "; ".join(used) or "–", ", ".join(fired) or "–"]
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
