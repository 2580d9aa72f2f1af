"""The rollout-engine figures people read, from one scrape: what the step-based sinks log.

vLLM's and SGLang's own metric names (vLLM ``vllm/v1/metrics/loggers.py``, SGLang
``python/sglang/srt/metrics/collector.py``; the first name a target serves wins). Per target,
over all its series (a vLLM data-parallel server labels each engine with ``engine``):

=========================  ===============================================================
figure                     from
=========================  ===============================================================
``running_requests``       ``vllm:num_requests_running`` / ``sglang:num_running_reqs``, summed
``waiting_requests``       ``vllm:num_requests_waiting`` / ``sglang:num_queue_reqs``, summed
``kv_cache_usage``         ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before
                           0.9) / ``sglang:token_usage``, mean (a fraction, 1 = full)
``generation_tokens_per_s`` increase of ``vllm:generation_tokens_total`` /
                           ``sglang:generation_tokens_total`` over the seconds between scrapes
``prompt_tokens_per_s``    likewise, ``..._prompt_tokens_total``
``prefix_cache_hit_rate``  increase of ``vllm:prefix_cache_hits_total`` over that of
                           ``vllm:prefix_cache_queries_total``; SGLang's ``sglang:cache_hit_rate``
``<latency>_p50``, ``_p99`` ``time_to_first_token``, ``inter_token_latency``
                           (``vllm:inter_token_latency_seconds``, before it
                           ``vllm:time_per_output_token_seconds``), ``e2e_latency``
                           (``..._e2e_request_latency_seconds``): quantiles of the bucket
                           increases since the previous scrape, as ``histogram_quantile``
=========================  ===============================================================

Rates and quantiles need a previous scrape (and, for quantiles, observations in between); a
figure without its source is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from collector.scrape.convert import Scraped
from telemetry.model.snapshot import Attributes, Gauge, Histogram

__all__ = ["PREFIX", "engine_figures", "quantile"]

PREFIX = "rollout_engine/"

SUMMED = {
    "running_requests": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting_requests": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
}
AVERAGED = {
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
}
RATES = {
    "generation_tokens_per_s": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "prompt_tokens_per_s": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
}
HIT_RATIOS = (
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries"),
)
HIT_RATE_GAUGES = ("sglang:cache_hit_rate",)
LATENCIES = {
    "time_to_first_token": (
        "vllm:time_to_first_token_seconds",
        "sglang:time_to_first_token_seconds",
    ),
    "inter_token_latency": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "e2e_latency": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}
QUANTILES = (("p50", 0.5), ("p99", 0.99))


def engine_figures(
    scraped: Scraped, elapsed_s: float | None, attributes: Attributes = ()
) -> tuple[Gauge, ...]:
    """The figures of one target's scrape, as gauges named ``rollout_engine/<figure>``.

    Args:
        scraped: the converted scrape (its counter increases and histogram windows are
            since the previous scrape of the same target).
        elapsed_s: seconds since that previous scrape; None on the first.
        attributes: the attributes of every figure (the engine's ``instance``).
    """
    gauges: dict[str, list[float]] = {}
    for point in scraped.points:
        if isinstance(point, Gauge):
            gauges.setdefault(point.metric, []).append(point.value)
    out: dict[str, float] = {}
    for figure, sources in SUMMED.items():
        values = _first(gauges, sources)
        if values is not None:
            out[figure] = sum(values)
    for figure, sources in AVERAGED.items():
        values = _first(gauges, sources)
        if values is not None:
            out[figure] = sum(values) / len(values)
    if elapsed_s is not None and elapsed_s > 0:
        for figure, sources in RATES.items():
            increase = _first(scraped.increases, sources)
            if increase is not None:
                out[figure] = increase / elapsed_s
    rate = _hit_rate(scraped.increases, gauges)
    if rate is not None:
        out["prefix_cache_hit_rate"] = rate
    if elapsed_s is not None:  # a first window is the whole history, not recent latency
        for figure, sources in LATENCIES.items():
            window = _first(scraped.windows, sources)
            if window is None or window.count <= 0:
                continue
            for suffix, q in QUANTILES:
                out[f"{figure}_{suffix}"] = quantile(q, window)
    return tuple(
        Gauge(PREFIX + figure, value, attributes=attributes)
        for figure, value in out.items()
        if math.isfinite(value)
    )


def quantile(q: float, window: Histogram) -> float:
    """Prometheus's ``histogram_quantile`` of one window's buckets.

    Linear interpolation within the bucket holding the rank; the first bucket starts at 0
    (when its bound is positive); a rank in the ``+Inf`` bucket gives the highest bound.
    """
    total = sum(window.bucket_counts)
    if total <= 0:
        return math.nan
    if not window.bounds:
        return math.nan
    rank = q * total
    below = 0.0
    for i, count in enumerate(window.bucket_counts):
        if below + count >= rank and count > 0:
            if i == len(window.bounds):
                return window.bounds[-1]
            upper = window.bounds[i]
            lower = window.bounds[i - 1] if i > 0 else min(0.0, upper)
            return lower + (upper - lower) * (rank - below) / count
        below += count
    return window.bounds[-1]


def _first(found: dict, sources: Sequence[str]):
    for name in sources:
        if name in found:
            return found[name]
    return None


def _hit_rate(increases: dict[str, float], gauges: dict[str, list[float]]) -> float | None:
    for hits, queries in HIT_RATIOS:
        if hits in increases and queries in increases:
            asked = increases[queries]
            return increases[hits] / asked if asked > 0 else None
    values = _first(gauges, HIT_RATE_GAUGES)
    return None if values is None else sum(values) / len(values)
