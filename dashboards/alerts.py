"""The Prometheus alert rules, as data: RL health, training progress, MoE balance, pipeline.

Thresholds are module constants (the dashboards draw them too); metric names come from
:mod:`dashboards.catalog` and the collector's and sink's own family names.
"""

from __future__ import annotations

from collector.scrape.engine_figures import AVERAGED, RATES, SUMMED
from collector.scrape.health import PREFIX as SCRAPE_PREFIX
from collector.selfmetrics import PREFIX as COLLECTOR_PREFIX
from dashboards import catalog as c
from exporters.remote_write.health import PREFIX as REMOTE_WRITE_PREFIX
from telemetry.heartbeat.families import FLOOR as HEARTBEAT_FLOOR
from telemetry.heartbeat.families import OUTSIDE as HEARTBEAT_OUTSIDE
from telemetry.heartbeat.families import PREFIX as HEARTBEAT

RL_HEALTH_INTERVAL = "10s"
"""Evaluation interval of the fast RL-health group (critical alerts without a hold-down)."""
KL_K3_WARNING = 0.01
KL_K3_CRITICAL = 0.1
STALENESS_WARNING = 4.0
MAX_OVER_IDEAL_WARNING = 2.0
MAX_OVER_IDEAL_CRITICAL = 4.0
STALL_AFTER = "10m"
"""No new trainer ``global_step`` for this long (and no ``close()``): training stalled."""
THROUGHPUT_DROP_RATIO = 0.5
"""Tokens/s over the last 10m at or below this share of the run's own level (1h before)."""
REWARD_DROP_FRACTION = 0.5
"""Mean reward over the last 10m fell by this share of the run's level (1h before) or more."""
GRAD_NORM_SPIKE_FACTOR = 10.0
"""A gradient norm at or above this multiple of the run's median over the hour before."""
PROGRESS_INTERVAL = "30s"
BASELINE = "[1h] offset 20m"
"""The run's own recent level: the hour that ended 20m ago (clear of the 10m window + 5m for)."""
COLLECTOR_JOB = "rltel-collector"
OVERFLOW_POINTS = "rltel_prometheus_overflow_points_total"
"""The Prometheus sink's own counter of points folded into overflow series."""
SINK_DROPPED = f"{COLLECTOR_PREFIX}sink_dropped_total"
POINTS_REJECTED = f"{COLLECTOR_PREFIX}points_rejected_total"
REMOTE_WRITE_DROPPED = f"{REMOTE_WRITE_PREFIX}samples_dropped_total"
KV_CACHE_FULL = 0.95
"""A rollout engine's KV-cache usage (1 = full) at or above this for ``KV_CACHE_FOR``."""
KV_CACHE_FOR = "5m"
WAITING_GROWING = 32.0
"""Waiting requests of one engine at or above this, and more than 10 minutes before."""
ENGINE_THROUGHPUT_DROP_RATIO = 0.5
"""A run's generation tokens/s over 5m at or below this times its level 10-40m before."""
ENGINES_INTERVAL = "30s"
STUCK_RANK_STEPS = 3
"""A rank is stuck after this many median steps without progress (and the job's floor,
``heartbeat.stall_floor_s``)."""
STUCK_RANK_FOR = "1m"
GPU_MEMORY_FREE_MIN = 0.05
"""A rank's GPU with less than this share of its memory free (NVML) for 5m: no headroom."""
HARDWARE_FOR = "5m"


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
    """The Prometheus rule groups: RL health (fast), progress, MoE balance, pipeline."""
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    kl3 = c.KL_K3.stat("avg")
    nonfinite = c.NONFINITE_LOGP_FRACTION.stat("avg")
    areal_staleness = c.AREAL_STALENESS["theta_avg"]
    staleness = c.per_run_first(
        c.STALENESS_THETA_AVG.stat("avg"),
        areal_staleness.name,
        c.beside_histogram(areal_staleness),
    )
    loss = f"({c.per_run_first(*(m.stat('avg') for m in c.POLICY_LOSS))})"
    grad = c.GRAD_NORM.name
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
        _rule("RLTrainInferKLNotFinite", _not_finite(kl3), "0s",
              "critical", "kl", f"Train/infer KL k3 is NaN or infinite ({run})",
              "kl_k3 is not finite: check nonfinite_logp_fraction and kl_k3_overflow_fraction."),
        _rule("RLNonFiniteLogprobs", f"{nonfinite} > 0", "0s", "critical", "kl",
              f"Non-finite logprobs on valid tokens ({run})",
              "ppo_actor/train_infer/nonfinite_logp_fraction = {{ $value }}: a trainer or "
              "rollout logprob is NaN/inf on a valid generated token."),
        _rule("RLLossNotFinite", _not_finite(loss), "0s", "critical", "training",
              f"Training loss is NaN or infinite ({run})",
              "ppo_actor/update/actor_loss/avg (AReaL's PPO actor; loss/avg where the run "
              "records no actor_loss) = {{ $value }}: the update diverged or a batch holds "
              "NaN; the weights may already be corrupt."),
        _rule("RLGradNormNotFinite", _not_finite(grad), "0s", "critical", "training",
              f"Gradient norm is NaN or infinite ({run})",
              "ppo_actor/update/grad_norm = {{ $value }}: the backward pass overflowed; "
              "the optimizer step (if taken) corrupts the weights."),
        _rule("RLSampleStalenessHigh", f"({staleness}) >= {STALENESS_WARNING}", "15m", "warning",
              "staleness",
              f"Mean sample staleness at or above {STALENESS_WARNING:g} versions ({run})",
              "ppo_actor/update/version_stats/sample_staleness_theta_avg = {{ $value }} "
              "checkpoint versions: rollouts lag the trainer."),
        _rule("RLFutureTokens", f"{future} > 0", "0s", "critical", "staleness",
              f"Tokens from a future policy version ({run})",
              "future_token_fraction = {{ $value }}: behaviour versions ahead of the trainer "
              "mean broken version bookkeeping."),
    ]  # fmt: skip
    return {
        "groups": [
            {"name": "rltel-rl-health", "interval": RL_HEALTH_INTERVAL, "rules": rl},
            {"name": "rltel-rl-progress", "interval": PROGRESS_INTERVAL, "rules": _progress()},
            {"name": "rltel-moe-balance", "interval": "1m", "rules": _moe()},
            {"name": "rltel-pipeline", "interval": "30s", "rules": _pipeline()},
            {"name": "rltel-engines", "interval": ENGINES_INTERVAL, "rules": _engines()},
            {"name": "rltel-heartbeat", "interval": "15s", "rules": _heartbeat()},
            {"name": "rltel-hardware", "interval": "30s", "rules": _hardware()},
        ]
    }


def _not_finite(series: str) -> str:
    return f"{series} != {series} or {series} == Inf or {series} == -Inf"


def _progress() -> list[dict]:
    """Training stalled, throughput and reward falling against the run's own level."""
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    step = f'{c.STEP.name}{{role="trainer"}}'
    closed = f'{c.CLOSED.name}{{role="trainer"}}'
    tokens = c.TOTAL_TOKENS.name
    reward = c.ROLLOUT_REWARD.name
    grad = c.GRAD_NORM.name
    reward_level = f"avg_over_time({reward}{BASELINE})"
    return [
        _rule("RLTrainingStalled",
              f"({step} unless changes({step}[{STALL_AFTER}]) > 0) "
              f"and {step} offset {STALL_AFTER} unless {closed} == 1",
              "0s", "critical", "progress",
              f"No new training step for {STALL_AFTER} ({run})",
              "global_step stays at {{ $value }} on {{ $labels.instance }} and the trainer "
              "did not close its StatsLogger: a hang (collective, data loader, rollout "
              "wait) or a crash."),
        _rule("RLThroughputDrop",
              f"rate({tokens}[10m]) <= {THROUGHPUT_DROP_RATIO} * rate({tokens}{BASELINE}) "
              f"and rate({tokens}{BASELINE}) > 0",
              "5m", "warning", "progress",
              f"Training tokens/s at or below {THROUGHPUT_DROP_RATIO:.0%} of the run's own "
              f"level ({run})",
              "train_perf/total_tokens grows at {{ $value }} tokens/s over the last 10m: a "
              "slow node, rollout starvation or throttling."),
        _rule("RLRewardCollapse",
              f"avg_over_time({reward}[10m]) "
              f"<= {reward_level} - {REWARD_DROP_FRACTION} * abs({reward_level})",
              "5m", "warning", "reward",
              f"Rollout reward fell by {REWARD_DROP_FRACTION:.0%} or more of its level ({run})",
              "rollout/reward averages {{ $value }} over the last 10m: policy collapse, a "
              "broken reward function or a shift in the prompts."),
        _rule("RLGradNormSpike",
              f"max_over_time({grad}[5m]) >= {GRAD_NORM_SPIKE_FACTOR:g} * "
              f"quantile_over_time(0.5, {grad}[1h] offset 5m)",
              "1m", "warning", "training",
              f"Gradient norm at or above {GRAD_NORM_SPIKE_FACTOR:g}x its median ({run})",
              "ppo_actor/update/grad_norm peaked at {{ $value }} in the last 5m: an "
              "outlier batch or the start of a divergence."),
    ]  # fmt: skip


def _moe() -> list[dict]:
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    ratio = c.MAX_OVER_IDEAL.name
    return [
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


def _pipeline() -> list[dict]:
    up = f'up{{job="{COLLECTOR_JOB}"}}'
    return [
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
              "OTLP sink of {{ $labels.job }} {{ $labels.instance }} dropped points",
              "{{ $value }} points dropped in 10m (queue full or spool limit reached): "
              "the collector is unreachable or too slow for this sender."),
        _rule("RltelCollectorSinkDropping", f"increase({SINK_DROPPED}[10m]) > 0", "0m",
              "warning", "pipeline", "Collector sink {{ $labels.sink }} drops snapshots",
              "{{ $value }} snapshots of run {{ $labels.run }} dropped in 10m: the "
              "{{ $labels.sink }} queue is full (a slow or failing sink)."),
        _rule("RltelCollectorRejectingPoints", f"increase({POINTS_REJECTED}[10m]) > 0", "0m",
              "warning", "pipeline", "Collector {{ $labels.instance }} rejects data points",
              "{{ $value }} data points could not be mapped in 10m (see the collector log)."),
        _rule("RltelCollectorRemoteWriteDropping", f"increase({REMOTE_WRITE_DROPPED}[10m]) > 0",
              "0m", "warning", "pipeline",
              "Collector {{ $labels.instance }} drops remote-write samples",
              "{{ $value }} samples dropped in 10m ({{ $labels.reason }}): the store was down "
              "past the backlog bound, refused them or they were too old (see the collector "
              "log and docs/troubleshooting.md)."),
    ]  # fmt: skip


def _hardware() -> list[dict]:
    """GPU memory headroom and clock throttling per rank (NVML readings at export)."""
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    free = c.GPU_MEMORY_FREE.name
    return [
        _rule("RLGpuMemoryHeadroomLow", f"{free} < {GPU_MEMORY_FREE_MIN}", HARDWARE_FOR,
              "warning", "training",
              f"GPU memory of rank {{{{ $labels.rank }}}} under {GPU_MEMORY_FREE_MIN:.0%} free "
              f"for {HARDWARE_FOR} ({run})",
              "hardware/gpu/memory_free_ratio of rank {{ $labels.rank }} = {{ $value }}: the "
              "next larger batch or sequence runs out of memory."),
        _rule("RLGpuThermalThrottling", f"{c.GPU_THROTTLE_THERMAL.name} > 0", HARDWARE_FOR,
              "warning", "training",
              f"GPU of rank {{{{ $labels.rank }}}} throttled for heat for {HARDWARE_FOR} ({run})",
              "NVML reports thermal slowdown on rank {{ $labels.rank }}: its clocks are held "
              "down and every rank waits for it at the collectives (cooling, a failing fan)."),
        _rule("RLGpuPowerThrottling", f"{c.GPU_THROTTLE_POWER.name} > 0", HARDWARE_FOR,
              "warning", "training",
              f"GPU of rank {{{{ $labels.rank }}}} held at its power cap for {HARDWARE_FOR} "
              f"({run})",
              "NVML reports power capping or power-brake slowdown on rank {{ $labels.rank }}: "
              "its clocks are held down and every rank waits for it at the collectives."),
    ]  # fmt: skip


def _heartbeat() -> list[dict]:
    """A rank without progress for 3 median steps and the floor, in the oldest phase.

    Every rank waits once one is stuck (at the next collective), so the rule names the
    rank whose phase began first among those that did not exit: the one that stopped.
    Ranks inside a ``record_timing`` phase come first (the others wait outside one, at the
    collective), so a waiting rank that left its phase early is never taken for it. Rollout
    and eval workers (a ``worker`` label; none on a trainer's ranks) wait for no one: each
    is its own oldest phase, named by its worker id.
    """
    run = "{{ $labels.experiment }}/{{ $labels.trial }}"
    by = "experiment, trial, role"
    reader = f"{by}, worker"
    series = f"{reader}, rank"
    progress = f"{HEARTBEAT}last_progress_timestamp_seconds"
    entered = f"{HEARTBEAT}phase_start_timestamp_seconds"
    exited = f"{HEARTBEAT}exited == 1"
    floor = f"max by ({by}) ({HEARTBEAT_FLOOR})"
    inside = f'{entered}{{phase!="{HEARTBEAT_OUTSIDE}"}}'
    first = (
        f"min by ({reader}) ({inside} unless on ({series}) {exited}) "
        f"or min by ({reader}) ({entered} unless on ({series}) {exited})"
    )
    steps = f"{STUCK_RANK_STEPS} * quantile by ({by}) (0.5, {HEARTBEAT}median_step_seconds)"
    median = (
        f'{{{{ with printf "quantile(0.5, {HEARTBEAT}median_step_seconds'
        "{experiment='%s',trial='%s',role='%s'})\" $labels.experiment $labels.trial "
        "$labels.role | query }}"
        '{{ . | first | value | printf "%.3g" }}{{ end }}'
    )
    pick = (
        "{{{{ if $labels.worker }}}}{role} worker {{{{ $labels.worker }}}}"
        "{{{{ else }}}}{rank} {{{{ $labels.rank }}}}{{{{ end }}}}"
    )
    who = pick.format(role="{{ $labels.role }}", rank="rank")
    title = pick.format(role="{{ $labels.role | title }}", rank="Rank")
    return [
        _rule("RLRankStuck",
              f"time() - {entered} "
              f"and on ({series}) (time() - {progress} > on ({by}) group_left () "
              f"({steps} > {floor} or {floor})) "
              f"and on ({series}) ({entered} == on ({reader}) group_left () ({first})) "
              f"unless on ({series}) {exited}",
              STUCK_RANK_FOR, "critical", "progress",
              f"{title} stuck in {{{{ $labels.phase }}}} ({run})",
              f"{who} on host {{{{ $labels.host }}}} has been in "
              "`{{ $labels.phase }}` for {{ $value | printf \"%.0f\" }} s; the median step is "
              f"{median} s."),
    ]  # fmt: skip


def _engines() -> list[dict]:
    """Rollout engines (vLLM, SGLang) the collector scrapes: KV cache, queue, target, tokens/s."""
    where = "{{ $labels.instance }} ({{ $labels.experiment }}/{{ $labels.trial }})"
    by = "by (experiment, trial, instance)"
    kv = " or ".join(f"max {by} ({name})" for name in AVERAGED["kv_cache_usage"])
    waiting = " or ".join(
        f"({name} >= {WAITING_GROWING} and delta({name}[10m]) > 0)"
        for name in SUMMED["waiting_requests"]
    )
    run = "by (experiment, trial)"
    tokens = [f"{name}_total" for name in RATES["generation_tokens_per_s"]]
    now = " or ".join(f"sum {run} (rate({name}[5m]))" for name in tokens)
    before = " or ".join(f"sum {run} (rate({name}[30m] offset 10m))" for name in tokens)
    return [
        _rule("RolloutEngineKVCacheFull", f"({kv}) >= {KV_CACHE_FULL}", KV_CACHE_FOR,
              "warning", "engines", f"KV cache of rollout engine {where} nearly full",
              f"KV-cache usage {{{{ $value }}}} for {KV_CACHE_FOR}: requests queue or are "
              "preempted; add engines or lower the concurrency."),
        _rule("RolloutEngineWaitingGrowing", waiting, "5m", "warning", "engines",
              f"Waiting requests of rollout engine {where} keep growing",
              '{{ $value | printf "%.0f" }} requests wait, more than 10m before: the engine '
              "cannot keep up with the rollout load."),
        _rule("RolloutEngineTargetDown", f"{SCRAPE_PREFIX}up == 0", "1m", "warning", "engines",
              f"Rollout engine target {where} down",
              "The collector cannot scrape {{ $labels.target }} (rltel_scrape_failures_total "
              "gives the reason): the engine is down, slow or serves no metrics."),
        _rule("RolloutEngineThroughputDrop",
              f"({now}) <= {ENGINE_THROUGHPUT_DROP_RATIO} * ({before}) and ({before}) > 0",
              "5m", "warning", "engines",
              "Rollout generation tokens/s dropped "
              "({{ $labels.experiment }}/{{ $labels.trial }})",
              "The run's engines generate {{ $value | printf \"%.1f\" }} tokens/s over 5m, at "
              f"or below {ENGINE_THROUGHPUT_DROP_RATIO:.0%} of their level 10-40m before."),
    ]  # fmt: skip
