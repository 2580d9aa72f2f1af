"""The "Rollout engines" dashboard: the vLLM and SGLang servers the collector scrapes.

Per engine (its ``instance``) and summed over the run's engines: queue, KV cache, token
throughput, prefix-cache hit rate and latency tails. The engine metric names are the ones the
receiver's figures read (:mod:`collector.scrape.figures`, vLLM's and SGLang's own names, which
reach Prometheus unchanged); where both engines name a quantity, the queries join the
names with ``or``, so one board serves either engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.scrape.figures import AVERAGED, HIT_RATE_GAUGES, HIT_RATIOS, LATENCIES, RATES, SUMMED
from collector.scrape.health import PREFIX as SCRAPE
from dashboards.panels import Panel, Query, dashboard, query_variable, row, stat, timeseries

RUN = 'experiment=~"$experiment", trial=~"$trial"'
UP = f"{SCRAPE}up"
PER_ENGINE = "{{instance}}"
KV_CACHE_WARNING = 0.95
"""KV-cache usage drawn as the threshold (the alert's, :mod:`dashboards.alerts`)."""


def either(template: str, names: Sequence[str]) -> str:
    """``template`` for each name (its ``{m}``), joined with ``or``: whichever the engine serves."""
    return " or ".join(template.format(m=name) for name in names)


def running(by: str) -> str:
    """Running requests summed ``by`` (``"by (instance) "``, or ``""`` over every engine)."""
    return either(f"sum {by}({{m}}{{{{{RUN}}}}})", SUMMED["running_requests"])


def waiting(by: str) -> str:
    return either(f"sum {by}({{m}}{{{{{RUN}}}}})", SUMMED["waiting_requests"])


def kv_cache(by: str) -> str:
    return either(f"avg {by}({{m}}{{{{{RUN}}}}})", AVERAGED["kv_cache_usage"])


def tokens_per_s(figure: str, by: str) -> str:
    """A counter's rate, summed ``by``: ``generation_tokens_per_s`` or ``prompt_...``."""
    counters = [f"{name}_total" for name in RATES[figure]]
    return either(f"sum {by}(rate({{m}}{{{{{RUN}}}}}[$__rate_interval]))", counters)


def hit_rate(by: str) -> str:
    ratios = [
        f"sum {by}(rate({hits}_total{{{RUN}}}[$__rate_interval])) / "
        f"sum {by}(rate({queries}_total{{{RUN}}}[$__rate_interval]))"
        for hits, queries in HIT_RATIOS
    ]
    gauges = [f"avg {by}({name}{{{RUN}}})" for name in HIT_RATE_GAUGES]
    return " or ".join(f"({q})" for q in [*ratios, *gauges])


def latency(figure: str, q: float) -> str:
    """``histogram_quantile`` per engine of the buckets' increase over the rate window."""
    buckets = either(
        f"sum by (instance, le) (rate({{m}}_bucket{{{{{RUN}}}}}[$__rate_interval]))",
        LATENCIES[figure],
    )
    return f"histogram_quantile({q}, {buckets})"


def _latency_panel(title: str, figure: str) -> Panel:
    return timeseries(
        title,
        Query(latency(figure, 0.5), f"p50 {PER_ENGINE}"),
        Query(latency(figure, 0.99), f"p99 {PER_ENGINE}"),
        unit="s",
        width=8,
    )


def engines() -> dict:
    """Rollout engines: targets up, requests, KV cache, tokens/s, hit rate, latency tails."""
    per = "by (instance) "
    panels: list[Panel] = [
        row("Rollout engines"),
        stat("Engine targets up", Query(f"sum({UP}{{{RUN}}})")),
        stat("Running requests (all engines)", Query(running(""))),
        stat("Waiting requests (all engines)", Query(waiting(""))),
        stat(
            "Generation tokens/s (all engines)",
            Query(tokens_per_s("generation_tokens_per_s", "")),
        ),
        timeseries(
            "Requests running and waiting",
            Query(running(per), f"running {PER_ENGINE}"),
            Query(waiting(per), f"waiting {PER_ENGINE}"),
        ),
        timeseries(
            "KV cache usage",
            Query(kv_cache(per), PER_ENGINE),
            unit="percentunit",
            thresholds=(KV_CACHE_WARNING,),
            description="Fraction of the KV cache in use (1 = full: requests wait or are "
            "preempted).",
        ),
        timeseries(
            "Tokens/s",
            Query(tokens_per_s("generation_tokens_per_s", per), f"generation {PER_ENGINE}"),
            Query(tokens_per_s("prompt_tokens_per_s", per), f"prompt {PER_ENGINE}"),
            Query(tokens_per_s("generation_tokens_per_s", ""), "generation, all engines"),
        ),
        timeseries(
            "Prefix cache hit rate",
            Query(hit_rate(per), PER_ENGINE),
            unit="percentunit",
            description="vLLM: cached over queried prompt tokens in the rate window; "
            "SGLang: its own cache_hit_rate gauge.",
        ),
        _latency_panel("Time to first token", "time_to_first_token"),
        _latency_panel("Inter-token latency", "inter_token_latency"),
        _latency_panel("End-to-end request latency", "e2e_latency"),
    ]
    variables = [
        query_variable("experiment", "experiment", UP, multi=True),
        query_variable("trial", "trial", f'{UP}{{experiment=~"$experiment"}}', multi=True),
    ]
    return dashboard(
        "rltel-engines",
        "rltel / Rollout engines",
        panels,
        variables,
        "vLLM and SGLang servers scraped by the rltel collector, per engine and summed.",
    )
