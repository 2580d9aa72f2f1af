"""The AReaL metrics the dashboards and alerts use, named as the Prometheus sink names them.

Each entry states the OTel instrument as the producers emit it (metric, kind, unit, point
attributes); the Prometheus name comes from :mod:`exporters.prometheus.naming`, the same
functions the sink uses, so a dashboard cannot drift from the exposition. The tests feed
one point per entry through the real sink and check every name the dashboards use.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporters.prometheus.naming import (
    Kind,
    MetricKey,
    histogram_gauge_names,
    metric_name,
    resolve_names,
)
from telemetry.model.names import CLOSED_METRIC, STEP_METRIC
from telemetry.model.snapshot import Attributes, StatReduce


@dataclass(frozen=True, slots=True)
class Metric:
    """One instrument: AReaL metric name (flat key without attributes), kind, unit."""

    metric: str
    kind: Kind
    unit: str = ""
    reduce: StatReduce = StatReduce.AVG
    attributes: Attributes = ()

    @property
    def name(self) -> str:
        """The Prometheus family name (counters end in ``_total``)."""
        return metric_name(self.metric, self.kind, self.unit)

    def stat(self, which: str) -> str:
        """A histogram's companion gauge (``avg``, ``min``, ``max``) or sample series.

        Args:
            which: ``avg``/``min``/``max`` for the last window's gauges, ``sum``/``count``/
                ``bucket`` for the cumulative histogram samples.

        Raises:
            ValueError: the metric is not a histogram, or ``which`` is unknown.
        """
        if self.kind != "histogram":
            raise ValueError(f"{self.metric!r} is a {self.kind}, not a histogram")
        gauges = histogram_gauge_names(self.name)
        if which in gauges:
            return gauges[which]
        if which in ("sum", "count", "bucket"):
            return f"{self.name}_{which}"
        raise ValueError(f"{self.metric!r}: unknown histogram series {which!r}")


def _hist(metric: str, unit: str = "", reduce: StatReduce = StatReduce.AVG) -> Metric:
    return Metric(metric, "histogram", unit, reduce)


RUN_LABELS = ("experiment", "trial")
"""The labels that name a run in Prometheus (the sink's from the run's resource)."""


def per_run_first(*selectors: str) -> str:
    """The first of ``selectors`` that a run has, per run: ``a or on (experiment, trial) b``.

    PromQL's ``or`` keeps every series of its left side and adds a right-side series only
    where no left-side series has the same labels; ``on (experiment, trial)`` compares the
    run labels alone, so a run that records both keys shows the first one only (never twice),
    and a run that records one shows that one. ``selectors`` are plain series selectors;
    parenthesise the result inside a larger expression.
    """
    return f" or on ({', '.join(RUN_LABELS)}) ".join(selectors)


def beside_histogram(gauge: Metric) -> str:
    """The family name the sink gives ``gauge`` in an exposition that also holds a histogram
    of the same key (another run's): :func:`~exporters.prometheus.naming.resolve_names`
    keeps the histogram's name and appends ``_gauge`` to the gauge's."""
    keys = [
        MetricKey(gauge.metric, "histogram", gauge.unit),
        MetricKey(gauge.metric, "gauge", gauge.unit),
    ]
    return resolve_names(keys)[keys[1]]


_TI = "ppo_actor/train_infer/"
_VS = "ppo_actor/update/version_stats/"
_LAYER: Attributes = (("layer", 0),)

# ppo_actor/train_infer/: masked token statistics (stat_compact), AVG unless noted.
KL_K1 = _hist(_TI + "kl_k1")
KL_K2 = _hist(_TI + "kl_k2")
KL_K3 = _hist(_TI + "kl_k3")
LOGP_DIFF = _hist(_TI + "logp_diff", reduce=StatReduce.AVG_MIN_MAX)
LOGP_DIFF_SIGN = (
    "d = log p_trainer − log p_rollout: trainer − rollout, positive where the trainer gives "
    "the token more probability. AReaL's actor records its own ppo_actor/update/logp_diff "
    "(no train_infer/; AReaL 1.0.4 has none) as rollout − trainer: the opposite sign."
)
"""The sign of the train/infer ``logp_diff``, as every panel and page that shows it says it."""
LOGP_ABS_DIFF = _hist(_TI + "logp_abs_diff", reduce=StatReduce.AVG_MIN_MAX)
NONFINITE_LOGP_FRACTION = _hist(_TI + "nonfinite_logp_fraction")
KL_K3_OVERFLOW_FRACTION = _hist(_TI + "kl_k3_overflow_fraction")
RATIO_OUTSIDE = tuple(_hist(f"{_TI}ratio_outside_{t}") for t in ("1.5", "2", "3", "5", "10"))

# ppo_actor/update/version_stats/: token-weighted staleness, global extrema.
STALENESS_THETA_AVG = _hist(_VS + "sample_staleness_theta_avg")
STALENESS_THETA_MIN = _hist(_VS + "sample_staleness_theta_min", reduce=StatReduce.MIN)
STALENESS_THETA_MAX = _hist(_VS + "sample_staleness_theta_max", reduce=StatReduce.MAX)
STALENESS_PROXIMAL_AVG = _hist(_VS + "sample_staleness_proximal_avg")
# AReaL's PPO actor (_log_version_staleness_stats) records the same keys as scalar streams (one
# value per micro-batch, averaged): gauges. A run has one or the other (one writer per key),
# and the board and the staleness alert read whichever the run has (see per_run_first).
AREAL_STALENESS = {
    which: Metric(f"{_VS}sample_staleness_{which}", "gauge")
    for which in ("theta_avg", "theta_min", "theta_max", "proximal_avg")
}
STALE_TOKEN_FRACTION = _hist(_VS + "stale_token_fraction")
FUTURE_TOKEN_FRACTION = _hist(_VS + "future_token_fraction")

# ppo_actor/: advantage sign fractions over the loss mask.
ADVANTAGE_FRACTIONS = {
    sign: _hist(f"ppo_actor/advantage_{sign}_fraction") for sign in ("positive", "negative", "zero")
}

# train_perf/: window rates are gauges, totals since engine start are counters.
TOKENS_PER_SECOND = Metric("train_perf/tokens_per_second", "gauge", "{token}/s")
CUMULATIVE_TOKENS_PER_SECOND = Metric(
    "train_perf/cumulative_tokens_per_second", "gauge", "{token}/s"
)
FLOPS_PER_SECOND = Metric("train_perf/estimated_flops_per_second", "gauge", "{flop}/s")
CUMULATIVE_FLOPS_PER_SECOND = Metric(
    "train_perf/cumulative_estimated_flops_per_second", "gauge", "{flop}/s"
)
WINDOW_SECONDS = Metric("train_perf/seconds", "gauge", "s")
WINDOW_TOKENS = Metric("train_perf/tokens", "gauge", "{token}")
TOTAL_TOKENS = Metric("train_perf/total_tokens", "counter", "{token}")
TOTAL_SECONDS = Metric("train_perf/total_seconds", "counter", "s")
MFU = Metric("train_perf/mfu", "gauge", "1")
CUMULATIVE_MFU = Metric("train_perf/cumulative_mfu", "gauge", "1")
TOTAL_FLOPS = Metric("train_perf/total_estimated_flops", "counter", "{flop}")

# timeperf/<name>: wall-clock seconds of record_timing scopes (scalar streams).
TIMEPERF_EXAMPLE = Metric("timeperf/train_step", "gauge", "s")
TIMEPERF_PATTERN = "timeperf_.+"

# The collector's span durations (collector/traces/durations.py): one histogram per run, role
# and phase (the span's name), from perf_tracer's scopes and sessions and record_timing spans.
SPAN_DURATION = Metric(
    "rltel/span_duration", "histogram", "s", StatReduce.AVG_MIN_MAX, (("phase", "train"),)
)

# The straggler view (telemetry.record.rank_spread): <key>/rank_min, rank_max, slowest_rank;
# by place, top_k/rank, top_k/value, chronic/rank, chronic/top_k_exports; chronic/exports;
# per_rank by rank (rank_series keys). SPREAD_PATTERN names them all, to keep them off the
# timeperf panel.
SECONDS_RANK_MIN = Metric("train_perf/seconds/rank_min", "gauge", "s")
SECONDS_RANK_MAX = Metric("train_perf/seconds/rank_max", "gauge", "s")
SECONDS_SLOWEST_RANK = Metric("train_perf/seconds/slowest_rank", "gauge")
TIMEPERF_SLOWEST_EXAMPLE = Metric("timeperf/train_step/slowest_rank", "gauge")
SLOWEST_RANK_PATTERN = ".+_slowest_rank"
SPREAD_PATTERN = (
    ".+_rank_(min|max)(_seconds)?|.+_top_k_(rank|value(_seconds)?)|"
    ".+_chronic_(rank|top_k_exports|exports)|.+_per_rank(_seconds)?|" + SLOWEST_RANK_PATTERN
)

# hardware/: each rank's memory peaks and, where NVML reads a GPU, its readings at export
# (telemetry/metrics/hardware.py), as per-rank gauges. The GPU test of
# tests/telemetry/metrics/test_hardware.py checks the NVML readings against nvidia-smi; on a
# CPU-only machine the tests feed NVML-shaped readings through the hardware source's ``gpu``
# reader, and alerts_test.yml pins the rules on them.
_RANK = (("rank", 0),)
PEAK_RSS_PER_RANK = Metric("hardware/memory/peak_rss_bytes/per_rank", "gauge", attributes=_RANK)
"""Each rank's resident high-water mark over the export window (read on every machine)."""
GPU_UTILIZATION = Metric("hardware/gpu/utilization_percent/per_rank", "gauge", attributes=_RANK)
GPU_MEMORY_USED = Metric("hardware/gpu/memory_used_bytes/per_rank", "gauge", attributes=_RANK)
GPU_MEMORY_FREE = Metric("hardware/gpu/memory_free_ratio/per_rank", "gauge", attributes=_RANK)
GPU_POWER = Metric("hardware/gpu/power_watts/per_rank", "gauge", attributes=_RANK)
GPU_TEMPERATURE = Metric("hardware/gpu/temperature_celsius/per_rank", "gauge", attributes=_RANK)
GPU_SM_CLOCK = Metric("hardware/gpu/sm_clock_mhz/per_rank", "gauge", attributes=_RANK)
GPU_THROTTLE_THERMAL = Metric("hardware/gpu/throttle_thermal/per_rank", "gauge", attributes=_RANK)
GPU_THROTTLE_POWER = Metric("hardware/gpu/throttle_power/per_rank", "gauge", attributes=_RANK)
GPU = (
    GPU_UTILIZATION,
    GPU_MEMORY_USED,
    GPU_MEMORY_FREE,
    GPU_POWER,
    GPU_TEMPERATURE,
    GPU_SM_CLOCK,
    GPU_THROTTLE_THERMAL,
    GPU_THROTTLE_POWER,
)
"""The NVML readings per rank, as the Hardware row and the GPU alerts read them."""

# moe_balance/: per layer (and expert) gauges; AReaL keys moe_balance/layer_<id>/...
MAX_OVER_IDEAL = Metric("moe_balance/max_over_ideal", "gauge", "1", attributes=_LAYER)
LOAD_PERCENT = Metric("moe_balance/load_percent", "gauge", "%", attributes=(*_LAYER, ("expert", 0)))
EXPERT_TOKENS = Metric(
    "moe_balance/tokens", "gauge", "{token}", attributes=(*_LAYER, ("expert", 0))
)

# ppo_actor/update/: the policy loss (a masked token stat) and the gradient norm (a scalar
# stream). AReaL's PPO actor records actor_loss (grpo_loss_fn); a user's own loop (rltel's demo
# and quick start) records loss. A run's loss is actor_loss where the run has it, else loss.
ACTOR_LOSS = _hist("ppo_actor/update/actor_loss", reduce=StatReduce.AVG_MIN_MAX)
LOSS = _hist("ppo_actor/update/loss", reduce=StatReduce.AVG_MIN_MAX)
POLICY_LOSS = (ACTOR_LOSS, LOSS)
"""The policy loss's keys, preferred first (see :func:`per_run_first`)."""
GRAD_NORM = Metric("ppo_actor/update/grad_norm", "gauge")

# rollout/: the rollout workers' reward (a scalar stream, count-weighted over workers).
ROLLOUT_REWARD = Metric("rollout/reward", "gauge")

# The StatsLogger's own: global_step of each trainer export, and the marker of close().
STEP = Metric(STEP_METRIC, "gauge")
CLOSED = Metric(CLOSED_METRIC, "gauge")

# rltel/otlp/: the OTLP sink's health, riding along with every export.
TRANSPORT_EXPORTED = Metric("rltel/otlp/points_exported", "counter", "{point}")
TRANSPORT_FAILED = Metric("rltel/otlp/points_failed", "counter", "{point}")
TRANSPORT_SPOOLED = Metric("rltel/otlp/points_spooled", "counter", "{point}")
TRANSPORT_DROPPED = Metric("rltel/otlp/points_dropped", "counter", "{point}")
TRANSPORT_QUEUE_DEPTH = Metric("rltel/otlp/queue_depth", "gauge", "{snapshot}")
TRANSPORT_SPOOL_BYTES = Metric("rltel/otlp/spool_bytes", "gauge", "By")
TRANSPORT_LATENCY = Metric("rltel/otlp/export_latency", "histogram", "s", StatReduce.AVG_MIN_MAX)

TRANSPORT = (
    TRANSPORT_EXPORTED,
    TRANSPORT_FAILED,
    TRANSPORT_SPOOLED,
    TRANSPORT_DROPPED,
    TRANSPORT_QUEUE_DEPTH,
    TRANSPORT_SPOOL_BYTES,
    TRANSPORT_LATENCY,
)

ALL: tuple[Metric, ...] = (
    KL_K1,
    KL_K2,
    KL_K3,
    LOGP_DIFF,
    LOGP_ABS_DIFF,
    NONFINITE_LOGP_FRACTION,
    KL_K3_OVERFLOW_FRACTION,
    *RATIO_OUTSIDE,
    STALENESS_THETA_AVG,
    STALENESS_THETA_MIN,
    STALENESS_THETA_MAX,
    STALENESS_PROXIMAL_AVG,
    STALE_TOKEN_FRACTION,
    FUTURE_TOKEN_FRACTION,
    *AREAL_STALENESS.values(),
    *ADVANTAGE_FRACTIONS.values(),
    ACTOR_LOSS,
    LOSS,
    GRAD_NORM,
    ROLLOUT_REWARD,
    STEP,
    CLOSED,
    TOKENS_PER_SECOND,
    CUMULATIVE_TOKENS_PER_SECOND,
    FLOPS_PER_SECOND,
    CUMULATIVE_FLOPS_PER_SECOND,
    WINDOW_SECONDS,
    WINDOW_TOKENS,
    TOTAL_TOKENS,
    TOTAL_SECONDS,
    MFU,
    CUMULATIVE_MFU,
    TOTAL_FLOPS,
    TIMEPERF_EXAMPLE,
    SPAN_DURATION,
    SECONDS_RANK_MIN,
    SECONDS_RANK_MAX,
    SECONDS_SLOWEST_RANK,
    TIMEPERF_SLOWEST_EXAMPLE,
    MAX_OVER_IDEAL,
    LOAD_PERCENT,
    EXPERT_TOKENS,
    PEAK_RSS_PER_RANK,
    *GPU,
    *TRANSPORT,
)
"""Every metric the dashboards and alert rules read, in one place."""
