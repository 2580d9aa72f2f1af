"""docs/metrics.md: every metric the dashboards and alert rules read, and the alert rules.

Each metric of :mod:`dashboards.catalog` gets its Prometheus names (from the sink's own
naming functions), the panels whose queries read it (from :mod:`dashboards.build`) and the
alert rules that do (from :mod:`dashboards.alerts`); its definition and healthy range are
written in :data:`DEFINITIONS`, and a catalogue entry without one fails the generator.
``python -m docs.gen`` loads this file by path.
"""

from __future__ import annotations

import re
from typing import Any

from dashboards.catalog import LOGP_DIFF_SIGN

KL_RANGE = "0 ≤ value < {warn} (alert at {warn}, critical at {crit})"

DEFINITIONS: dict[str, tuple[str, str]] = {
    # metric -> (definition, healthy range); d = log p_trainer - log p_rollout per token.
    "ppo_actor/train_infer/kl_k1": (
        "mean of −d over finite valid tokens (d = log p_trainer − log p_rollout)",
        "near 0; may be negative",
    ),
    "ppo_actor/train_infer/kl_k2": ("mean of d²/2 over finite valid tokens", "near 0, ≥ 0"),
    "ppo_actor/train_infer/kl_k3": (
        "mean of expm1(d) − d over finite valid tokens (Schulman's k3, float64 `expm1`)",
        KL_RANGE,
    ),
    "ppo_actor/train_infer/logp_diff": (
        f"d over finite valid tokens; buckets at 0, ±log{{1.5,2,3,5,10}}. {LOGP_DIFF_SIGN}",
        "avg near 0; min/max within ±log 2",
    ),
    "ppo_actor/train_infer/logp_abs_diff": ("\\|d\\| over finite valid tokens", "avg ≪ 0.1"),
    "ppo_actor/train_infer/nonfinite_logp_fraction": (
        "fraction of valid tokens where either log-prob is NaN or ±inf",
        "0 (alert above 0)",
    ),
    "ppo_actor/train_infer/kl_k3_overflow_fraction": (
        "fraction of finite valid tokens where expm1(d) overflows to +inf",
        "0",
    ),
    **{
        f"ppo_actor/train_infer/ratio_outside_{t}": (
            f"fraction of valid tokens with \\|d\\| > log {t} (probability ratio outside "
            f"[1/{t}, {t}]); NaN when any valid token is non-finite",
            "near 0; larger t closer to 0",
        )
        for t in ("1.5", "2", "3", "5", "10")
    },
    "ppo_actor/update/version_stats/sample_staleness_theta_avg": (
        "token-weighted mean of current − behaviour policy version over valid generated tokens",
        "< {stale} versions (alert at {stale} for 15m)",
    ),
    "ppo_actor/update/version_stats/sample_staleness_theta_min": (
        "smallest current − behaviour version over valid generated tokens",
        "≥ 0",
    ),
    "ppo_actor/update/version_stats/sample_staleness_theta_max": (
        "largest current − behaviour version over valid generated tokens",
        "within the configured max staleness",
    ),
    "ppo_actor/update/version_stats/sample_staleness_proximal_avg": (
        "token-weighted mean of proximal − behaviour version (decoupled PPO)",
        "small, ≥ 0",
    ),
    "ppo_actor/update/version_stats/stale_token_fraction": (
        "fraction of valid generated tokens with behaviour version < current version",
        "depends on the off-policyness allowed; 0 when fully on-policy",
    ),
    "ppo_actor/update/version_stats/future_token_fraction": (
        "fraction of valid generated tokens with behaviour version > current version",
        "0 (alert above 0)",
    ),
    **{
        f"ppo_actor/advantage_{sign}_fraction": (
            f"fraction of loss-mask tokens whose advantage is {word}, before filtering",
            "positive and negative both well above 0" if sign != "zero" else "well below 1",
        )
        for sign, word in (("positive", "> 0"), ("negative", "< 0"), ("zero", "exactly 0"))
    },
    "ppo_actor/update/actor_loss": (
        "the policy loss over the loss mask, as AReaL's PPO actor (`grpo_loss_fn`) records it; "
        "the board and `RLLossNotFinite` read it where a run records it",
        "finite",
    ),
    "ppo_actor/update/loss": (
        "the policy loss over the loss mask, as a loop of your own records it (rltel's demo "
        "and quick start); read only for a run that records no `actor_loss`",
        "finite",
    ),
    "ppo_actor/update/grad_norm": (
        "gradient norm of the update (a scalar stream, count-weighted mean)",
        "finite; below {spike}× its median over the last hour",
    ),
    "rollout/reward": (
        "rollout reward, merged count-weighted over rollout workers",
        "not below its recent level by {reward_drop} of it",
    ),
    "rltel/step": ("the trainer's `global_step` of the export (rltel's own)", "increases"),
    "rltel/closed": ("1 once the trainer called `StatsLogger.close()` (rltel's own)", "–"),
    "train_perf/tokens_per_second": ("window tokens / window seconds", "steady"),
    "train_perf/cumulative_tokens_per_second": ("total tokens / total seconds", "steady"),
    "train_perf/estimated_flops_per_second": ("window estimated FLOPs / window seconds", "steady"),
    "train_perf/cumulative_estimated_flops_per_second": (
        "total estimated FLOPs / total seconds",
        "steady",
    ),
    "rltel/span_duration": (
        "durations of the spans the collector received (perf_tracer scopes and sessions, "
        "`record_timing` spans), per run, `role` and `phase` (the span's name)",
        "steady per phase; a phase whose p90 climbs is where a step's time goes",
    ),
    "train_perf/seconds": (
        "seconds inside `TrainPerf.measure` this window, max over ranks",
        "steady",
    ),
    "train_perf/tokens": (
        "valid tokens (prompt + response) trained this window, summed over the DP group",
        "steady",
    ),
    "train_perf/total_tokens": (
        "valid tokens since the `TrainPerf` was created",
        "rate not below {drop} of its level (alert)",
    ),
    "train_perf/total_seconds": ("training seconds since the `TrainPerf` was created", "grows"),
    "train_perf/mfu": (
        "window FLOPs / (seconds × peak FLOP/s per device × devices)",
        "hardware and model dependent; 0.3-0.6 is typical for large dense training",
    ),
    "train_perf/cumulative_mfu": ("total FLOPs / (total seconds × peak × devices)", "as `mfu`"),
    "train_perf/total_estimated_flops": ("estimated training FLOPs since creation", "grows"),
    "timeperf/train_step": (
        "wall seconds of a `record_timing(name)` scope (here `train_step`); one series per name",
        "steady",
    ),
    "train_perf/seconds/rank_min": ("the fastest rank's `train_perf/seconds`", "close to max"),
    "train_perf/seconds/rank_max": ("the slowest rank's `train_perf/seconds`", "close to min"),
    "train_perf/seconds/slowest_rank": ("the rank holding `rank_max`", "not always the same"),
    "timeperf/train_step/slowest_rank": (
        "the rank with the largest mean of a timing (here `train_step`)",
        "not always the same",
    ),
    "hardware/memory/peak_rss_bytes/per_rank": (
        "a rank's resident high-water mark over the export window (`stats_logger.hardware`;"
        " per phase under `hardware/phase/<phase>/`, GPU readings under `hardware/gpu/`)",
        "steady; a rank that keeps growing leaks",
    ),
    "hardware/gpu/utilization_percent/per_rank": (
        "NVML: the share (%) of the last sample period in which a kernel ran on the rank's GPU",
        "high and even across ranks; a low rank waits for data or for the others",
    ),
    "hardware/gpu/memory_used_bytes/per_rank": (
        "NVML: device memory in use on the rank's GPU (every process on it)",
        "steady after warm-up",
    ),
    "hardware/gpu/memory_free_ratio/per_rank": (
        "NVML: free over total device memory of the rank's GPU",
        "> {gpu_free} (alert under {gpu_free} for 5 minutes)",
    ),
    "hardware/gpu/power_watts/per_rank": (
        "NVML: the board's power draw (W)",
        "below the board's power limit",
    ),
    "hardware/gpu/temperature_celsius/per_rank": (
        "NVML: the GPU die temperature (°C)",
        "below the slowdown temperature of the device",
    ),
    "hardware/gpu/sm_clock_mhz/per_rank": (
        "NVML: the streaming multiprocessors' clock (MHz)",
        "the same on every rank; a rank held lower is throttled",
    ),
    "hardware/gpu/throttle_thermal/per_rank": (
        "1 while NVML reports software or hardware thermal slowdown, else 0",
        "0 (alert after 5 minutes at 1)",
    ),
    "hardware/gpu/throttle_power/per_rank": (
        "1 while NVML reports the power cap or power-brake slowdown, else 0",
        "0 (alert after 5 minutes at 1)",
    ),
    "moe_balance/max_over_ideal": (
        "max(c) / (Σc / E) over a layer's expert counts c; 0 for a layer with no assignments",
        "< {moe_warn} (alert at {moe_warn}, critical at {moe_crit})",
    ),
    "moe_balance/load_percent": (
        "100 · c_e / Σc: an expert's share of the layer's tokens",
        "near 100 / E",
    ),
    "moe_balance/tokens": ("c_e: token assignments routed to an expert (top-k repeats count)", "–"),
    "rltel/otlp/points_exported": ("points the sender's OTLP sink delivered", "grows"),
    "rltel/otlp/points_failed": ("points whose export failed permanently", "0"),
    "rltel/otlp/points_spooled": (
        "points written to the on-disk spool",
        "0 when the collector is up",
    ),
    "rltel/otlp/points_dropped": ("points dropped (queue full, spool limit)", "0 (alert)"),
    "rltel/otlp/queue_depth": ("snapshots waiting in the OTLP sink's queue", "near 0"),
    "rltel/otlp/spool_bytes": ("bytes in the sender's spool", "0 when the collector is up"),
    "rltel/otlp/export_latency": ("seconds per OTLP export call", "well under `otlp.timeout`"),
}
"""Per catalogue metric: definition (from the source documents) and healthy range."""


def _range_values() -> dict[str, str]:
    from dashboards import alerts as a

    return {
        "warn": f"{a.KL_K3_WARNING:g}",
        "crit": f"{a.KL_K3_CRITICAL:g}",
        "stale": f"{a.STALENESS_WARNING:g}",
        "spike": f"{a.GRAD_NORM_SPIKE_FACTOR:g}",
        "reward_drop": f"{a.REWARD_DROP_FRACTION:.0%}",
        "drop": f"{a.THROUGHPUT_DROP_RATIO:.0%}",
        "moe_warn": f"{a.MAX_OVER_IDEAL_WARNING:g}",
        "moe_crit": f"{a.MAX_OVER_IDEAL_CRITICAL:g}",
        "gpu_free": f"{a.GPU_MEMORY_FREE_MIN:.0%}",
    }


def _areal_key(m: Any) -> str:
    from telemetry.model.snapshot import StatReduce

    attributes = dict(m.attributes)
    key = m.metric
    if attributes:
        head, _, leaf = key.rpartition("/")
        parts = [f"{name}_<{name[0]}>" for name in ("layer", "expert") if name in attributes]
        key = "/".join([head, *parts, leaf])
    if m.kind == "histogram" and m.reduce == StatReduce.AVG_MIN_MAX:
        return f"`{key}/{{avg,min,max}}`"
    return f"`{key}`"


def _series(m: Any) -> list[str]:
    if m.kind != "histogram":
        return [m.name]
    return [m.stat(s) for s in ("avg", "min", "max", "bucket", "count", "sum")]


def _uses(m: Any, exprs: list[tuple[str, str]]) -> list[str]:
    """Labels of the queries (label, expr) that read ``m``, by name or by a name pattern."""
    return reading(_series(m), exprs)


def reading(series: list[str], exprs: list[tuple[str, str]]) -> list[str]:
    """Labels of the queries (label, expr) that read any of ``series``, by name or pattern."""
    found = []
    for label, expr in exprs:
        by_name = any(re.search(rf"(?<![\w:]){re.escape(s)}(?![\w:])", expr) for s in series)
        patterns = re.findall(r'__name__=~"([^"]+)"', expr)
        negated = re.findall(r'__name__!~"([^"]+)"', expr)
        by_pattern = any(re.fullmatch(p, s) for p in patterns for s in series) and not any(
            re.fullmatch(p, s) for p in negated for s in series
        )
        if (by_name or by_pattern) and label not in found:
            found.append(label)
    return found


def panel_queries() -> list[tuple[str, str]]:
    """(board: panel title, expr) of every panel target of every board."""
    from dashboards import build

    out = []
    for board in build.BOARDS.values():
        dashboard = board()
        title = dashboard["title"].removeprefix("rltel / ")
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{title}: {panel['title']}", target.get("expr", "")))
    return out


def alert_rules() -> list[dict]:
    """Every alert rule of :mod:`dashboards.alerts`."""
    from dashboards import alerts

    return [rule for group in alerts.alert_rules()["groups"] for rule in group["rules"]]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_AREAL_VS = "ppo_actor/update/version_stats/sample_staleness_"
AREAL_SCALARS: dict[tuple[str, str], tuple[str, str]] = {
    # (metric, kind) -> (definition, healthy range): AReaL's own record of a key rltel's
    # producers record as another kind (AReaL's PPO actor, _log_version_staleness_stats).
    (f"{_AREAL_VS}{which}", "gauge"): (
        f"AReaL's PPO actor's own {what}, a scalar per micro-batch averaged over the "
        "micro-batches with a generated token (not token-weighted); a run has it or rltel's "
        "histogram of the key, never both",
        healthy,
    )
    for which, what, healthy in (
        (
            "theta_avg",
            "mean of current − behaviour version",
            "< {stale} versions (alert at {stale} for 15m)",
        ),
        ("theta_min", "smallest current − behaviour version", "≥ 0"),
        ("theta_max", "largest current − behaviour version", "within the configured max staleness"),
        ("proximal_avg", "mean of proximal − behaviour version", "small, ≥ 0"),
    )
}


def _definition(metric: Any) -> tuple[str, str]:
    """The definition and healthy range of a catalogue entry (by key, or key and kind)."""
    return AREAL_SCALARS.get((metric.metric, metric.kind)) or DEFINITIONS[metric.metric]


def render_metrics() -> str:
    from dashboards import catalog

    missing = [m.metric for m in catalog.ALL if m.metric not in DEFINITIONS]
    if missing:
        raise SystemExit(f"docs/gen_metrics.py: no definition for catalogue metrics {missing}")
    values = _range_values()
    panels = panel_queries()
    rules = alert_rules()
    alert_exprs = [(r["alert"], r["expr"]) for r in rules]
    lines = [
        "<!-- Generated by `python -m docs.gen` from dashboards/catalog.py, dashboards/boards.py,",
        "     dashboards/rl_board.py, dashboards/pipeline_board.py, dashboards/engines_board.py,",
        "     dashboards/alerts.py and the families of the collector, its sinks and the engines;",
        "     do not edit. -->",
        "# Metrics",
        "",
        "Every metric the dashboards and alert rules read, as the producers emit it. The",
        "Prometheus names come from the sink's own naming functions ([OTel mapping and",
        "Prometheus names](otel-mapping.md)); histograms have `_avg`/`_min`/`_max` gauges (the",
        "last step) and cumulative `_bucket`/`_count`/`_sum`. Definitions follow the source",
        "documents (AReaL's metric and evaluation guides, Twinkle's metric list); see",
        "[producers.md](producers.md) for the functions that record them. A `timeperf/<name>`",
        "key stands for every timing; `<l>` and `<e>` are a layer and an expert. The series of",
        "the telemetry path itself and of the rollout engines follow the alert rules",
        "([other series](#other-series-the-dashboards-and-alert-rules-read)).",
        "",
        "| AReaL key | Prometheus | type (unit) | definition | healthy range | panels | alerts |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in catalog.ALL:
        definition, healthy = _definition(m)
        names = _series(m)
        prom = f"`{names[0]}`" if len(names) == 1 else f"`{m.name}` + `_avg`, `_min`, `_max`, …"
        unit = f" (`{m.unit}`)" if m.unit else ""
        labels = dict(m.attributes)
        if labels:
            prom += " {" + ",".join(labels) + "}"
        if (m.metric, m.kind) in AREAL_SCALARS:
            prom += f", `{catalog.beside_histogram(m)}` beside another run's histogram"
        used = "; ".join(_uses(m, panels)) or "–"
        fired = ", ".join(_uses(m, alert_exprs)) or "–"
        row = [
            _areal_key(m),
            prom,
            f"{m.kind}{unit}",
            definition,
            healthy.format(**values),
            _cell(used),
            fired,
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## Alert rules",
        "",
        "Generated from `dashboards/alerts.py` (`python -m dashboards.build` writes",
        '`dashboards/prometheus/alerts.yml` from the same code). "For" is the hold-down: the',
        "condition must hold that long before the alert fires. Thresholds are starting points:",
        "tune them in `dashboards/alerts.py`, regenerate, and move the pins in",
        "`dashboards/prometheus/alerts_test.yml`.",
        "",
        "| Alert | Fires when | For | Severity | Summary |",
        "|---|---|---|---|---|",
    ]
    for rule in rules:
        summary = re.sub(r"\s*\(\{\{ \$labels\.experiment \}\}/\{\{ \$labels\.trial \}\}\)", "",
                         rule["annotations"]["summary"])  # fmt: skip
        row = [
            rule["alert"],
            f"`{_cell(rule['expr'])}`",
            rule["for"],
            rule["labels"]["severity"],
            _cell(summary),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
