"""Generate the Grafana dashboards and the Prometheus alert rules from code.

``python -m dashboards.build`` writes ``dashboards/grafana/*.json`` and
``dashboards/prometheus/alerts.yml``; ``--check`` exits 1 when a committed file differs
from what the code generates. Metric names come from :mod:`dashboards.catalog`, i.e.
from the Prometheus sink's own naming functions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from dashboards import catalog as c
from dashboards.panels import (
    Panel,
    Query,
    dashboard,
    heatmap,
    query_variable,
    row,
    stat,
    timeseries,
)

HERE = Path(__file__).resolve().parent
GRAFANA_DIR = HERE / "grafana"
ALERTS_PATH = HERE / "prometheus" / "alerts.yml"

RUN = '{experiment=~"$experiment", trial=~"$trial"}'
"""Label matchers of the run variables, added to every dashboard query."""

# Alert thresholds (documented in the README; the promtool tests pin them).
KL_K3_WARNING = 0.01
KL_K3_CRITICAL = 0.1
STALENESS_WARNING = 4.0
MAX_OVER_IDEAL_WARNING = 2.0
MAX_OVER_IDEAL_CRITICAL = 4.0
COLLECTOR_JOB = "rltel-collector"
OVERFLOW_POINTS = "rltel_prometheus_overflow_points_total"
"""The Prometheus sink's own counter of points folded into overflow series."""


def _sel(name: str, extra: str = "") -> str:
    """``name{run matchers[, extra]}``."""
    inner = RUN[1:-1] + (f", {extra}" if extra else "")
    return f"{name}{{{inner}}}"


def _run_variables(metric: str) -> list[dict]:
    return [
        query_variable("experiment", "experiment", metric, multi=True),
        query_variable("trial", "trial", f'{metric}{{experiment=~"$experiment"}}', multi=True),
    ]


def _weighted_mean(hist: c.Metric) -> str:
    """Token-weighted mean over the rate window, from the cumulative histogram samples."""
    by = "by (experiment, trial)"
    return (
        f"sum {by} (rate({_sel(hist.stat('sum'))}[$__rate_interval]))\n"
        f"/ sum {by} (rate({_sel(hist.stat('count'))}[$__rate_interval]))"
    )


def throughput() -> dict:
    """Tokens/s (window and cumulative), FLOP/s, MFU, step time and timeperf."""
    legend = "{{experiment}}/{{trial}}"
    panels: list[Panel] = [
        row("Tokens"),
        timeseries(
            "Training tokens/s",
            Query(_sel(c.TOKENS_PER_SECOND.name), f"window {legend}"),
            Query(_sel(c.CUMULATIVE_TOKENS_PER_SECOND.name), f"cumulative {legend}"),
            unit="short",
            description="train_perf/tokens_per_second (since the last export) and "
            "train_perf/cumulative_tokens_per_second (since engine start); whole cluster.",
        ),
        timeseries(
            "Tokens/s from the total_tokens counter",
            Query(f"rate({_sel(c.TOTAL_TOKENS.name)}[$__rate_interval])", legend),
            description="Wall-clock rate of train_perf/total_tokens: includes rollout and "
            "other non-training time, unlike train_perf/tokens_per_second.",
        ),
        stat("Total tokens", Query(f"sum({_sel(c.TOTAL_TOKENS.name)})"), width=8),
        stat(
            "Training share of wall time",
            Query(f"avg(rate({_sel(c.TOTAL_SECONDS.name)}[$__rate_interval]))"),
            unit="percentunit",
            width=8,
            description="rate of train_perf/total_seconds: fraction of wall time in train_batch.",
        ),
        stat("Window tokens", Query(f"sum({_sel(c.WINDOW_TOKENS.name)})"), width=8),
        row("FLOPs"),
        timeseries(
            "Estimated FLOP/s",
            Query(_sel(c.FLOPS_PER_SECOND.name), f"window {legend}"),
            Query(_sel(c.CUMULATIVE_FLOPS_PER_SECOND.name), f"cumulative {legend}"),
            unit="FLOPS",
            description="Model math of the text backbone (seed's FLOPs rules); absent when "
            "no estimator is registered for the architecture.",
        ),
        stat(
            "Total estimated FLOPs",
            Query(f"sum({_sel(c.TOTAL_FLOPS.name)})"),
            unit="short",
            width=12,
            height=8,
        ),
        timeseries(
            "MFU",
            Query(_sel(c.MFU.name), f"window {legend}"),
            Query(_sel(c.CUMULATIVE_MFU.name), f"cumulative {legend}"),
            unit="percentunit",
            description="Estimated FLOP/s over the configured peak; present only when a peak "
            "FLOP/s per device is given.",
        ),
        row("Time"),
        timeseries(
            "Training time per export window",
            Query(_sel(c.WINDOW_SECONDS.name), legend),
            unit="s",
            description="train_perf/seconds: max over ranks of train_batch time in the window.",
        ),
        timeseries(
            "timeperf",
            Query(_sel("", f'__name__=~"{c.TIMEPERF_PATTERN}"'), "{{__name__}}"),
            unit="s",
            description="Every timeperf/<name> scope (record_timing), one line per scope.",
        ),
    ]
    return dashboard(
        "rltel-throughput",
        "rltel / Throughput",
        panels,
        _run_variables(c.TOKENS_PER_SECOND.name),
        "Training throughput, estimated FLOPs and timings (AReaL train_perf, timeperf).",
    )


def moe_balance() -> dict:
    """max_over_ideal per layer over time, and per-expert load of a selected layer."""
    variables = _run_variables(c.MAX_OVER_IDEAL.name)
    variables.append(query_variable("layer", "layer", _sel(c.MAX_OVER_IDEAL.name)))
    load = _sel(c.LOAD_PERCENT.name, 'layer="$layer"')
    tokens = _sel(c.EXPERT_TOKENS.name, 'layer="$layer"')
    panels: list[Panel] = [
        row("All layers"),
        heatmap(
            "max_over_ideal: layer x time",
            Query(f"max by (layer) ({_sel(c.MAX_OVER_IDEAL.name)})", "{{layer}}"),
            width=16,
            height=10,
            description="Per-layer max expert load / ideal load (1 = balanced, 0 = no "
            "routing); find when and where imbalance starts.",
        ),
        stat(
            "Worst layer max_over_ideal",
            Query(f"max({_sel(c.MAX_OVER_IDEAL.name)})"),
            width=8,
            height=10,
            thresholds=(MAX_OVER_IDEAL_WARNING, MAX_OVER_IDEAL_CRITICAL),
        ),
        timeseries(
            "max_over_ideal per layer",
            Query(f"max by (layer) ({_sel(c.MAX_OVER_IDEAL.name)})", "layer {{layer}}"),
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


def rl_health() -> dict:
    """Train/infer KL and logprob mismatch, staleness, advantage sign fractions."""
    legend = "{{experiment}}/{{trial}}"
    kl = ((c.KL_K1, "k1"), (c.KL_K2, "k2"), (c.KL_K3, "k3"))
    panels: list[Panel] = [
        row("Train/infer mismatch (ppo_actor/train_infer)"),
        timeseries(
            "KL estimators (last step)",
            *(Query(_sel(m.stat("avg")), f"{k} {legend}") for m, k in kl),
            thresholds=(KL_K3_WARNING, KL_K3_CRITICAL),
            description="Means of k1 = -d, k2 = d^2/2, k3 = exp(d)-1-d over valid generated "
            "tokens, d = log p_trainer - log p_rollout. k1 can be negative.",
        ),
        timeseries(
            "KL k3, token-weighted over the rate window",
            Query(_weighted_mean(c.KL_K3), legend),
            thresholds=(KL_K3_WARNING, KL_K3_CRITICAL),
        ),
        timeseries(
            "logp_diff avg / min / max",
            Query(_sel(c.LOGP_DIFF.stat("avg")), f"avg {legend}"),
            Query(_sel(c.LOGP_DIFF.stat("min")), f"min {legend}"),
            Query(_sel(c.LOGP_DIFF.stat("max")), f"max {legend}"),
            Query(_sel(c.LOGP_ABS_DIFF.stat("avg")), f"|d| avg {legend}"),
        ),
        heatmap(
            "logp_diff distribution",
            Query(
                f"sum by (le) (increase({_sel(c.LOGP_DIFF.stat('bucket'))}[$__rate_interval]))",
                "{{le}}",
            ),
            description="Token counts per logp_diff bucket (where bucket bounds are set).",
        ),
        timeseries(
            "Non-finite and overflow fractions",
            Query(_sel(c.NONFINITE_LOGP_FRACTION.stat("avg")), f"nonfinite {legend}"),
            Query(_sel(c.KL_K3_OVERFLOW_FRACTION.stat("avg")), f"k3 overflow {legend}"),
            unit="percentunit",
        ),
        timeseries(
            "Probability ratio outside [1/t, t]",
            *(Query(_sel(m.stat("avg")), m.metric.rsplit("_", 1)[1]) for m in c.RATIO_OUTSIDE),
            unit="percentunit",
        ),
        row("Staleness (ppo_actor/update/version_stats)"),
        timeseries(
            "Sample staleness (versions)",
            Query(_sel(c.STALENESS_THETA_AVG.stat("avg")), f"theta avg {legend}"),
            Query(_sel(c.STALENESS_THETA_MIN.stat("min")), f"theta min {legend}"),
            Query(_sel(c.STALENESS_THETA_MAX.stat("max")), f"theta max {legend}"),
            Query(_sel(c.STALENESS_PROXIMAL_AVG.stat("avg")), f"proximal avg {legend}"),
            thresholds=(STALENESS_WARNING,),
        ),
        timeseries(
            "Stale / future token fractions",
            Query(_sel(c.STALE_TOKEN_FRACTION.stat("avg")), f"stale {legend}"),
            Query(_sel(c.FUTURE_TOKEN_FRACTION.stat("avg")), f"future {legend}"),
            unit="percentunit",
            description="future > 0 means behaviour versions ahead of the trainer: a bug.",
        ),
        row("Advantages (ppo_actor)"),
        timeseries(
            "Advantage sign fractions (tokens)",
            *(Query(_sel(m.stat("avg")), s) for s, m in c.ADVANTAGE_FRACTIONS.items()),
            unit="percentunit",
            width=24,
            options={"legend": {"displayMode": "list", "placement": "right"}},
        ),
    ]
    return dashboard(
        "rltel-rl-health",
        "rltel / RL health",
        panels,
        _run_variables(c.KL_K3.stat("avg")),
        "Train/infer logprob mismatch, KL estimators, staleness and advantages.",
    )


def _rule(
    name: str, expr: str, for_: str, severity: str, family: str, summary: str, description: str
) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "family": family},
        "annotations": {"summary": summary, "description": description},
    }


def alert_rules() -> dict:
    """The Prometheus rule groups: KL, staleness, MoE balance, pipeline health."""
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    kl3 = c.KL_K3.stat("avg")
    nonfinite = c.NONFINITE_LOGP_FRACTION.stat("avg")
    staleness = c.STALENESS_THETA_AVG.stat("avg")
    future = c.FUTURE_TOKEN_FRACTION.stat("avg")
    rl = [
        _rule("RLTrainInferKLHigh", f"{kl3} > {KL_K3_WARNING}", "10m", "warning", "kl",
              f"Train/infer KL k3 above {KL_K3_WARNING} for 10m ({run})",
              "ppo_actor/train_infer/kl_k3 = {{ $value }}: trainer and rollout engine "
              "logprobs disagree (numerics, stale weights or sampling filters)."),
        _rule("RLTrainInferKLCritical", f"{kl3} > {KL_K3_CRITICAL}", "2m", "critical", "kl",
              f"Train/infer KL k3 above {KL_K3_CRITICAL} ({run})",
              "ppo_actor/train_infer/kl_k3 = {{ $value }}: off-policy mismatch large "
              "enough to bias the policy gradient."),
        _rule("RLTrainInferKLNotFinite", f"{kl3} != {kl3} or abs({kl3}) == Inf", "0m",
              "critical", "kl", f"Train/infer KL k3 is NaN or infinite ({run})",
              "kl_k3 is not finite: check nonfinite_logp_fraction and kl_k3_overflow_fraction."),
        _rule("RLNonFiniteLogprobs", f"{nonfinite} > 0", "0m", "critical", "kl",
              f"Non-finite logprobs on valid tokens ({run})",
              "ppo_actor/train_infer/nonfinite_logp_fraction = {{ $value }}: a trainer or "
              "rollout logprob is NaN/inf on a valid generated token."),
        _rule("RLSampleStalenessHigh", f"{staleness} > {STALENESS_WARNING}", "15m", "warning",
              "staleness", f"Mean sample staleness above {STALENESS_WARNING:g} versions ({run})",
              "ppo_actor/update/version_stats/sample_staleness_theta_avg = {{ $value }} "
              "checkpoint versions: rollouts lag the trainer."),
        _rule("RLFutureTokens", f"{future} > 0", "0m", "critical", "staleness",
              f"Tokens from a future policy version ({run})",
              "future_token_fraction = {{ $value }}: behaviour versions ahead of the trainer "
              "mean broken version bookkeeping."),
    ]  # fmt: skip
    ratio = c.MAX_OVER_IDEAL.name
    moe = [
        _rule("MoEExpertImbalance", f"{ratio} > {MAX_OVER_IDEAL_WARNING}", "15m", "warning",
              "moe", f"MoE layer {{{{ $labels.layer }}}} max/ideal load above "
              f"{MAX_OVER_IDEAL_WARNING:g} ({run})",
              "moe_balance/layer_{{ $labels.layer }}/max_over_ideal = {{ $value }}."),
        _rule("MoEExpertImbalanceCritical", f"{ratio} > {MAX_OVER_IDEAL_CRITICAL}", "15m",
              "critical", "moe", f"MoE layer {{{{ $labels.layer }}}} max/ideal load above "
              f"{MAX_OVER_IDEAL_CRITICAL:g} ({run})",
              "moe_balance/layer_{{ $labels.layer }}/max_over_ideal = {{ $value }}: "
              "one expert takes most of the layer's tokens."),
    ]  # fmt: skip
    up = f'up{{job="{COLLECTOR_JOB}"}}'
    pipeline = [
        _rule("RltelCollectorDown", f"{up} == 0", "1m", "critical", "pipeline",
              "rltel collector {{ $labels.instance }} is down",
              "Prometheus cannot scrape the collector; senders spool to disk meanwhile."),
        _rule("RltelCollectorAbsent", f"absent({up})", "5m", "warning", "pipeline",
              "No rltel collector scrape target",
              f"Prometheus has no target with job={COLLECTOR_JOB}."),
        _rule("RltelSeriesOverflow", f"increase({OVERFLOW_POINTS}[10m]) > 0", "0m", "warning",
              "pipeline", "Series limit reached on {{ $labels.instance }}",
              "{{ $value }} points went to otel_metric_overflow series in 10m: raise "
              "series_limit or reduce label cardinality (per-expert MoE metrics)."),
    ]  # fmt: skip
    return {
        "groups": [
            {"name": "rltel-rl-health", "interval": "30s", "rules": rl},
            {"name": "rltel-moe-balance", "interval": "1m", "rules": moe},
            {"name": "rltel-pipeline", "interval": "30s", "rules": pipeline},
        ]
    }


def rendered() -> dict[Path, str]:
    """Every generated file and its exact content."""
    boards = {"throughput": throughput(), "moe_balance": moe_balance(), "rl_health": rl_health()}
    out = {
        GRAFANA_DIR / f"{name}.json": json.dumps(board, indent=2, sort_keys=True) + "\n"
        for name, board in boards.items()
    }
    header = "# Generated by `python -m dashboards.build` from dashboards/build.py; do not edit.\n"
    out[ALERTS_PATH] = header + yaml.safe_dump(alert_rules(), sort_keys=False, width=4096)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the generated files, or with ``--check`` report the ones that differ."""
    parser = argparse.ArgumentParser(prog="python -m dashboards.build", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"out of date: {path} (run python -m dashboards.build)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
