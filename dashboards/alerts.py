"""The Prometheus alert rules, as data: KL, staleness, MoE balance, pipeline health.

Thresholds are module constants (the dashboards draw them too); metric names come from
:mod:`dashboards.catalog` and the collector's and sink's own family names.
"""

from __future__ import annotations

from collector.selfmetrics import PREFIX as COLLECTOR_PREFIX
from dashboards import catalog as c

RL_HEALTH_INTERVAL = "10s"
"""Evaluation interval of the fast RL-health group (critical alerts without a hold-down)."""
KL_K3_WARNING = 0.01
KL_K3_CRITICAL = 0.1
STALENESS_WARNING = 4.0
MAX_OVER_IDEAL_WARNING = 2.0
MAX_OVER_IDEAL_CRITICAL = 4.0
COLLECTOR_JOB = "rltel-collector"
OVERFLOW_POINTS = "rltel_prometheus_overflow_points_total"
"""The Prometheus sink's own counter of points folded into overflow series."""
SINK_DROPPED = f"{COLLECTOR_PREFIX}sink_dropped_total"
POINTS_REJECTED = f"{COLLECTOR_PREFIX}points_rejected_total"


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
        _rule("RLTrainInferKLHigh", f"{kl3} >= {KL_K3_WARNING}", "10m", "warning", "kl",
              f"Train/infer KL k3 at or above {KL_K3_WARNING} for 10m ({run})",
              "ppo_actor/train_infer/kl_k3 = {{ $value }}: trainer and rollout engine "
              "logprobs disagree (numerics, stale weights or sampling filters)."),
        _rule("RLTrainInferKLCritical", f"{kl3} >= {KL_K3_CRITICAL}", "0s", "critical", "kl",
              f"Train/infer KL k3 at or above {KL_K3_CRITICAL} ({run})",
              "ppo_actor/train_infer/kl_k3 = {{ $value }}: off-policy mismatch large "
              "enough to bias the policy gradient."),
        _rule("RLTrainInferKLNotFinite", f"{kl3} != {kl3} or abs({kl3}) == Inf", "0s",
              "critical", "kl", f"Train/infer KL k3 is NaN or infinite ({run})",
              "kl_k3 is not finite: check nonfinite_logp_fraction and kl_k3_overflow_fraction."),
        _rule("RLNonFiniteLogprobs", f"{nonfinite} > 0", "0s", "critical", "kl",
              f"Non-finite logprobs on valid tokens ({run})",
              "ppo_actor/train_infer/nonfinite_logp_fraction = {{ $value }}: a trainer or "
              "rollout logprob is NaN/inf on a valid generated token."),
        _rule("RLSampleStalenessHigh", f"{staleness} >= {STALENESS_WARNING}", "15m", "warning",
              "staleness",
              f"Mean sample staleness at or above {STALENESS_WARNING:g} versions ({run})",
              "ppo_actor/update/version_stats/sample_staleness_theta_avg = {{ $value }} "
              "checkpoint versions: rollouts lag the trainer."),
        _rule("RLFutureTokens", f"{future} > 0", "0s", "critical", "staleness",
              f"Tokens from a future policy version ({run})",
              "future_token_fraction = {{ $value }}: behaviour versions ahead of the trainer "
              "mean broken version bookkeeping."),
    ]  # fmt: skip
    ratio = c.MAX_OVER_IDEAL.name
    moe = [
        _rule("MoEExpertImbalance", f"{ratio} >= {MAX_OVER_IDEAL_WARNING}", "15m", "warning",
              "moe", f"MoE layer {{{{ $labels.layer }}}} max/ideal load at or above "
              f"{MAX_OVER_IDEAL_WARNING:g} ({run})",
              "moe_balance/layer_{{ $labels.layer }}/max_over_ideal = {{ $value }}."),
        _rule("MoEExpertImbalanceCritical", f"{ratio} >= {MAX_OVER_IDEAL_CRITICAL}", "15m",
              "critical", "moe", f"MoE layer {{{{ $labels.layer }}}} max/ideal load at or above "
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
        _rule("RltelTransportDroppedPoints", f"increase({c.TRANSPORT_DROPPED.name}[10m]) > 0",
              "0m", "warning", "pipeline",
              "OTLP transport of {{ $labels.job }} {{ $labels.instance }} dropped points",
              "{{ $value }} points dropped in 10m (queue full or spool limit reached): "
              "the collector is unreachable or too slow for this sender."),
        _rule("RltelCollectorSinkDropping", f"increase({SINK_DROPPED}[10m]) > 0", "0m",
              "warning", "pipeline", "Collector sink {{ $labels.sink }} drops snapshots",
              "{{ $value }} snapshots of run {{ $labels.run }} dropped in 10m: the "
              "{{ $labels.sink }} queue is full (a slow or failing sink)."),
        _rule("RltelCollectorRejectingPoints", f"increase({POINTS_REJECTED}[10m]) > 0", "0m",
              "warning", "pipeline", "Collector {{ $labels.instance }} rejects data points",
              "{{ $value }} data points could not be mapped in 10m (see the collector log)."),
    ]  # fmt: skip
    return {
        "groups": [
            {"name": "rltel-rl-health", "interval": RL_HEALTH_INTERVAL, "rules": rl},
            {"name": "rltel-moe-balance", "interval": "1m", "rules": moe},
            {"name": "rltel-pipeline", "interval": "30s", "rules": pipeline},
        ]
    }
