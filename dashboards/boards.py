"""The training run's Grafana dashboards: throughput and MoE balance.

Every query filters on the run variables (``experiment``, ``trial``); names come from
:mod:`dashboards.catalog`. The RL health board is :mod:`dashboards.rl_board`, the telemetry
path's own :mod:`dashboards.pipeline_board`.
"""

from __future__ import annotations

from dashboards import catalog as c
from dashboards.alerts import MAX_OVER_IDEAL_CRITICAL, MAX_OVER_IDEAL_WARNING
from dashboards.hardware_panels import gpu_panels
from dashboards.panels import (
    Panel,
    Query,
    dashboard,
    heatmap,
    row,
    stat,
    timeseries,
)
from dashboards.variables import NUMERICAL, query_variable

RUN = '{experiment=~"$experiment", trial=~"$trial"}'
"""Label matchers of the run variables, added to every dashboard query."""


def sel(name: str, extra: str = "") -> str:
    """``name{run matchers[, extra]}``."""
    inner = RUN[1:-1] + (f", {extra}" if extra else "")
    return f"{name}{{{inner}}}"


def run_variables(metric: str) -> list[dict]:
    return [
        query_variable("experiment", "experiment", metric, multi=True),
        query_variable("trial", "trial", f'{metric}{{experiment=~"$experiment"}}', multi=True),
    ]


def _span_mean() -> str:
    """Mean span duration per role and phase over the rate window."""
    by = "by (experiment, trial, role, phase)"
    span = c.SPAN_DURATION
    return (
        f"sum {by} (rate({sel(span.stat('sum'))}[$__rate_interval]))\n"
        f"/ sum {by} (rate({sel(span.stat('count'))}[$__rate_interval]))"
    )


def _span_p90() -> str:
    """The 90th percentile of span durations per role and phase over the rate window."""
    by = "by (experiment, trial, role, phase, le)"
    bucket = sel(c.SPAN_DURATION.stat("bucket"))
    return f"histogram_quantile(0.9, sum {by} (rate({bucket}[$__rate_interval])))"


def throughput() -> dict:
    """Tokens/s (window and cumulative), FLOP/s, MFU, step time and timeperf."""
    legend = "{{experiment}}/{{trial}}"
    panels: list[Panel] = [
        row("Tokens"),
        timeseries(
            "Training tokens/s",
            Query(sel(c.TOKENS_PER_SECOND.name), f"window {legend}"),
            Query(sel(c.CUMULATIVE_TOKENS_PER_SECOND.name), f"cumulative {legend}"),
            unit="short",
            description="train_perf/tokens_per_second (since the last export) and "
            "train_perf/cumulative_tokens_per_second (since engine start); whole cluster.",
        ),
        timeseries(
            "Tokens/s from the total_tokens counter",
            Query(f"rate({sel(c.TOTAL_TOKENS.name)}[$__rate_interval])", legend),
            description="Wall-clock rate of train_perf/total_tokens: includes rollout and "
            "other non-training time, unlike train_perf/tokens_per_second.",
        ),
        stat("Total tokens", Query(f"sum({sel(c.TOTAL_TOKENS.name)})"), width=8),
        stat(
            "Training share of wall time",
            Query(f"avg(rate({sel(c.TOTAL_SECONDS.name)}[$__rate_interval]))"),
            unit="percentunit",
            width=8,
            description="rate of train_perf/total_seconds: fraction of wall time in train_batch.",
        ),
        stat("Window tokens", Query(f"sum({sel(c.WINDOW_TOKENS.name)})"), width=8),
        row("FLOPs"),
        timeseries(
            "Estimated FLOP/s",
            Query(sel(c.FLOPS_PER_SECOND.name), f"window {legend}"),
            Query(sel(c.CUMULATIVE_FLOPS_PER_SECOND.name), f"cumulative {legend}"),
            unit="flops",
            description="Model math of the text backbone (seed's FLOPs rules); absent when "
            "no estimator is registered for the architecture.",
        ),
        stat(
            "Total estimated FLOPs",
            Query(f"sum({sel(c.TOTAL_FLOPS.name)})"),
            unit="short",
            width=12,
            height=8,
        ),
        timeseries(
            "MFU",
            Query(sel(c.MFU.name), f"window {legend}"),
            Query(sel(c.CUMULATIVE_MFU.name), f"cumulative {legend}"),
            unit="percentunit",
            description="Estimated FLOP/s over the configured peak; present only when a peak "
            "FLOP/s per device is given.",
        ),
        row("Time"),
        timeseries(
            "Training time per export window",
            Query(sel(c.WINDOW_SECONDS.name), legend),
            unit="s",
            description="train_perf/seconds: max over ranks of train_batch time in the window.",
        ),
        timeseries(
            "timeperf",
            Query(
                sel("", f'__name__=~"{c.TIMEPERF_PATTERN}", __name__!~"{c.SPREAD_PATTERN}"'),
                "{{__name__}}",
            ),
            unit="s",
            description="Every timeperf/<name> scope (record_timing), one line per scope.",
        ),
        timeseries(
            "Phase latency (spans): mean and p90",
            Query(_span_mean(), "mean {{role}} {{phase}}"),
            Query(_span_p90(), "p90 {{role}} {{phase}}"),
            unit="s",
            description="rltel_span_duration_seconds: the collector's histogram of span "
            "durations per role and phase (perf_tracer scopes, rollout session phases, "
            "record_timing spans), mean and p90 over the rate window. Needs tracing on and "
            "the collector.",
        ),
        row("Stragglers"),
        timeseries(
            "Slowest rank",
            Query(sel("", f'__name__=~"{c.SLOWEST_RANK_PATTERN}"'), "{{__name__}}"),
            unit="none",
            description="The rank with the longest time of each timing and of train_batch "
            "(train_perf/seconds), and the rank with the most tokens: <key>/slowest_rank. "
            "A rank that stays on top is a straggler.",
        ),
        timeseries(
            "Training time per rank: fastest and slowest",
            Query(sel(c.SECONDS_RANK_MIN.name), f"fastest {legend}"),
            Query(sel(c.SECONDS_RANK_MAX.name), f"slowest {legend}"),
            unit="s",
            description="train_perf/seconds/rank_min and rank_max: the spread of train_batch "
            "time over ranks in the window; a wide gap means the others wait for one rank.",
        ),
        row("Hardware"),
        timeseries(
            "Peak resident memory per rank",
            Query(sel(c.PEAK_RSS_PER_RANK.name), "rank {{rank}}"),
            unit="bytes",
            description="hardware/memory/peak_rss_bytes per rank (stats_logger.hardware): the "
            "process's resident high-water mark over each export window; per phase under "
            "hardware/phase/<phase>/, GPU readings under hardware/gpu/ where NVML reads one.",
        ),
        *gpu_panels(sel),
    ]
    return dashboard(
        "rltel-throughput",
        "rltel / Throughput",
        panels,
        run_variables(c.TOKENS_PER_SECOND.name),
        "Training throughput, estimated FLOPs and timings (AReaL train_perf, timeperf).",
    )


def moe_balance() -> dict:
    """max_over_ideal per layer over time, and per-expert load of a selected layer."""
    variables = run_variables(c.MAX_OVER_IDEAL.name)
    variables.append(query_variable("layer", "layer", sel(c.MAX_OVER_IDEAL.name), sort=NUMERICAL))
    load = sel(c.LOAD_PERCENT.name, 'layer="$layer"')
    tokens = sel(c.EXPERT_TOKENS.name, 'layer="$layer"')
    panels: list[Panel] = [
        row("All layers"),
        heatmap(
            "max_over_ideal: layer x time",
            Query(f"max by (layer) ({sel(c.MAX_OVER_IDEAL.name)})", "{{layer}}"),
            width=16,
            height=10,
            description="Per-layer max expert load / ideal load (1 = balanced, 0 = no "
            "routing); find when and where imbalance starts.",
        ),
        stat(
            "Worst layer max_over_ideal",
            Query(f"max({sel(c.MAX_OVER_IDEAL.name)})"),
            width=8,
            height=10,
            thresholds=(MAX_OVER_IDEAL_WARNING, MAX_OVER_IDEAL_CRITICAL),
        ),
        timeseries(
            "max_over_ideal per layer",
            Query(f"max by (layer) ({sel(c.MAX_OVER_IDEAL.name)})", "layer {{layer}}"),
            width=24,
            thresholds=(MAX_OVER_IDEAL_WARNING, MAX_OVER_IDEAL_CRITICAL),
        ),
        row("Layer $layer"),
        heatmap(
            "Expert load % (layer $layer): expert x time",
            Query(f"max by (expert) ({load})", "{{expert}}"),
            unit="percent",
            width=16,
            height=10,
            description="100 * c_e / sum(c_e) per expert; the ideal share is 100 / E.",
        ),
        timeseries(
            "Expert load / ideal (layer $layer)",
            Query(
                f"max by (expert) ({load})\n/ on () group_left () "
                f"(100 / count(max by (expert) ({load})))",
                "expert {{expert}}",
            ),
            width=8,
            height=10,
            description="load_percent / (100 / E): 1 is the ideal share, comparable across "
            "models with different expert counts.",
        ),
        timeseries(
            "Routed tokens per expert (layer $layer)",
            Query(f"max by (expert) ({tokens})", "expert {{expert}}"),
            width=24,
        ),
    ]
    return dashboard(
        "rltel-moe-balance",
        "rltel / MoE balance",
        panels,
        variables,
        "MoE routing balance (AReaL moe_balance scope).",
    )
