"""The "Rollout engines" dashboard: the vLLM and SGLang servers the collector scrapes.

Per engine (its ``instance``) and summed over the run's engines: queue, KV cache, token
throughput, prefix-cache hit rate and latency tails. The engine metric names are the ones the
receiver's figures read (:mod:`collector.scrape.engine_figures`, vLLM's and SGLang's own
names, which reach Prometheus unchanged); where both engines name a quantity, the per-engine
queries join the names with ``or`` (an engine serving two names, as vLLM's old and new ones,
counts once: they share its ``instance``), so one board serves either engine and a run with
both. A sum over every engine is the sum of those per-engine series (:func:`total`): summing
each name first and joining the sums with ``or`` would keep only the first engine's.
"""

from __future__ import annotations

from collections.abc import Sequence

from collector.scrape.engine_figures import (
    AVERAGED,
    HIT_RATE_GAUGES,
    HIT_RATIOS,
    LATENCIES,
    RATES,
    SUMMED,
)
from collector.scrape.health import PREFIX as SCRAPE
from dashboards.panels import Panel, Query, dashboard, row, stat, timeseries
from dashboards.variables import query_variable

RUN = 'experiment=~"$experiment", trial=~"$trial"'
UP = f"{SCRAPE}up"
PER = "by (instance) "
PER_ENGINE = "{{instance}}"
KV_CACHE_WARNING = 0.95
"""KV-cache usage drawn as the threshold (the alert's, :mod:`dashboards.alerts`)."""


def either(template: str, names: Sequence[str]) -> str:
    """``template`` for each name (its ``{m}``), joined with ``or``: whichever the engine serves."""
    return " or ".join(template.format(m=name) for name in names)


def total(per_engine: str) -> str:
    """The sum over every engine of a per-engine (``by (instance)``) query."""
    return f"sum({per_engine})"


def running() -> str:
    """Running requests per engine."""
    return either(f"sum {PER}({{m}}{{{{{RUN}}}}})", SUMMED["running_requests"])


def waiting() -> str:
    """Waiting requests per engine."""
    return either(f"sum {PER}({{m}}{{{{{RUN}}}}})", SUMMED["waiting_requests"])


def kv_cache() -> str:
    """KV-cache usage per engine (the mean over its data-parallel engines)."""
    return either(f"avg {PER}({{m}}{{{{{RUN}}}}})", AVERAGED["kv_cache_usage"])


def tokens_per_s(figure: str) -> str:
    """A counter's rate per engine: ``generation_tokens_per_s`` or ``prompt_tokens_per_s``."""
    counters = [f"{name}_total" for name in RATES[figure]]
    return either(f"sum {PER}(rate({{m}}{{{{{RUN}}}}}[$__rate_interval]))", counters)


def hit_rate() -> str:
    """Prefix-cache hit rate per engine: vLLM's counters' ratio, or SGLang's gauge."""
    ratios = [
        f"sum {PER}(rate({hits}_total{{{RUN}}}[$__rate_interval])) / "
        f"sum {PER}(rate({queries}_total{{{RUN}}}[$__rate_interval]))"
        for hits, queries in HIT_RATIOS
    ]
    gauges = [f"avg {PER}({name}{{{RUN}}})" for name in HIT_RATE_GAUGES]
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
    generation = tokens_per_s("generation_tokens_per_s")
    panels: list[Panel] = [
        row("Rollout engines"),
        stat("Engine targets up", Query(f"sum({UP}{{{RUN}}})")),
        stat("Running requests (all engines)", Query(total(running()))),
        stat("Waiting requests (all engines)", Query(total(waiting()))),
        stat("Generation tokens/s (all engines)", Query(total(generation))),
        timeseries(
            "Requests running and waiting",
            Query(running(), f"running {PER_ENGINE}"),
            Query(waiting(), f"waiting {PER_ENGINE}"),
        ),
        timeseries(
            "KV cache usage",
            Query(kv_cache(), PER_ENGINE),
            unit="percentunit",
            thresholds=(KV_CACHE_WARNING,),
            description="Fraction of the KV cache in use (1 = full: requests wait or are "
            "preempted).",
        ),
        timeseries(
            "Tokens/s",
            Query(generation, f"generation {PER_ENGINE}"),
            Query(tokens_per_s("prompt_tokens_per_s"), f"prompt {PER_ENGINE}"),
            Query(total(generation), "generation, all engines"),
        ),
        timeseries(
            "Prefix cache hit rate",
            Query(hit_rate(), PER_ENGINE),
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
