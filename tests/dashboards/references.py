"""What every dashboard panel must show, computed in numpy from what the test recorded.

The test sends steps of two runs (:data:`CHOSEN`, the run the dashboards are set to, and
:data:`DECOY`, whose trial the unescaped name of the chosen one would match as a regex).
A :data:`History` is what was sent up to a scrape; a :class:`Window` is the history at
the first and at the last sample of a rate window, and the seconds between them. Each
panel target has a :class:`Reference`: the labels its series are told apart by and the
value of each series, from the producers' inputs (never from a query), the senders'
health and the collector's configuration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from telemetry.metrics.train_infer import DEFAULT_LOGP_DIFF_BOUNDS
from telemetry.metrics.train_infer_states import TAIL_THRESHOLDS
from telemetry.otlp.wire import STEP_METRICS
from tests.dashboards.producers import PEAK_FLOPS, StepInputs, flops_estimate

EXPERIMENT, CHOSEN, DECOY = "exp", "t.1", "tx1"
LAYER = 1
"""The MoE layer the ``$layer`` variable is set to."""
SERIES_LIMIT = 32
"""The collector's Prometheus series limit per metric (the decoy's noise goes past it)."""
SHARED_SINKS = (
    ("shared", "prometheus"),
    ("shared", "remote_write"),
    *((f"{EXPERIMENT}_{trial}", "samples") for trial in (CHOSEN, DECOY)),
)
"""``(run, sink)`` labels of the collector's sinks: Prometheus and remote write for every
snapshot, each run's ``samples.jsonl``."""


@dataclass(frozen=True)
class Sent:
    """One sender's health once its latest request was answered."""

    job: str
    instance: str
    requests: int
    points: int
    latency: float
    """Seconds of its latest request."""


@dataclass(frozen=True)
class Step:
    """One step: each run's inputs, the chosen run's timeperf, each sender's health."""

    inputs: Mapping[str, StepInputs]
    timeperf: float
    """The chosen run's ``timeperf/train_step`` (measured wall time, as exported)."""
    peak_rss: float
    """The chosen run's ``hardware/memory/peak_rss_bytes`` of rank 0 (measured, as exported)."""
    sent: tuple[Sent, ...]


History = tuple[Step, ...]


@dataclass(frozen=True)
class Window:
    """A rate window that starts and ends on a sample: the history both show, and the
    seconds between them (the window's length)."""

    start: History
    end: History
    seconds: float


Values = dict[tuple, float]
"""Series (its label values, in the order of ``Reference.by``) -> value."""


@dataclass(frozen=True)
class Reference:
    """What one panel target shows: its series by the labels ``by``, and their values."""

    by: tuple[str, ...]
    values: Callable[[Window], Values]


RUN_LABELS = ("experiment", "trial")
RUN = (EXPERIMENT, CHOSEN)


# -- one step of the chosen run ----------------------------------------------------------


GPU_PANELS = {
    ("GPU utilisation per rank", "A"): "utilization_percent",
    ("GPU memory used per rank", "A"): "memory_used_bytes",
    ("GPU memory headroom per rank", "A"): "memory_free_ratio",
    ("GPU power per rank", "A"): "power_watts",
    ("GPU temperature per rank", "A"): "temperature_celsius",
    ("SM clock per rank", "A"): "sm_clock_mhz",
    ("Clock throttling per rank", "A"): "throttle_thermal",
    ("Clock throttling per rank", "B"): "throttle_power",
}
"""The Hardware row's GPU panels (title, target) and the NVML reading each shows."""
GPU_READINGS = tuple(dict.fromkeys(GPU_PANELS.values()))


def _gpu(reading: str) -> Reference:
    """Rank 0's GPU ``reading`` at the chosen run's last step, by rank (its only one)."""
    return Reference(("rank",), lambda w: {("0",): _last_step(w.end).gpu[reading]})


def _chosen(history: History) -> list[StepInputs]:
    return [step.inputs[CHOSEN] for step in history]


def _last_step(history: History) -> StepInputs:
    return history[-1].inputs[CHOSEN]


def _valid(s: StepInputs) -> np.ndarray:
    return s.mask.numpy()


def _finite(s: StepInputs) -> np.ndarray:
    """Whether both logprobs are finite, per valid token."""
    finite = np.isfinite(s.trainer_logp.numpy()) & np.isfinite(s.rollout_logp.numpy())
    return finite[_valid(s)]


def _diff(s: StepInputs) -> np.ndarray:
    """d = log p_trainer - log p_rollout on the valid tokens where both are finite."""
    d = (s.trainer_logp.numpy() - s.rollout_logp.numpy())[_valid(s)]
    return d[_finite(s)]


def _k3(d: np.ndarray) -> np.ndarray:
    return np.expm1(d) - d


def _ratio_outside(t: float) -> Callable[[StepInputs], float]:
    """Share of valid tokens with ratio outside [1/t, t]; NaN if one is not finite."""

    def share(s: StepInputs) -> float:
        if not _finite(s).all():
            return math.nan
        return float(np.mean(np.abs(_diff(s)) > math.log(t)))

    return share


def _behaviour(s: StepInputs) -> np.ndarray:
    """Behaviour versions of the valid tokens of known version."""
    versions = s.versions.numpy()[_valid(s)]
    return versions[versions >= 0]


def _advantages(s: StepInputs) -> np.ndarray:
    return s.advantages.numpy()[_valid(s)]


def _tokens(s: StepInputs) -> float:
    return float(_valid(s).sum())


def _seconds(s: StepInputs) -> float:
    return sum(s.batch_ms) / 1000.0


def _flops(s: StepInputs) -> float:
    return sum(flops_estimate(int(n)) for n in _valid(s).sum(axis=1))


def _expert_counts(s: StepInputs, layer: int) -> np.ndarray:
    experts, num_experts = s.routing[layer]
    return np.bincount(np.asarray(experts), minlength=num_experts)


def _max_over_ideal(s: StepInputs) -> dict[int, float]:
    out = {}
    for layer in s.routing:
        counts = _expert_counts(s, layer)
        out[layer] = float(counts.max() / (counts.sum() / len(counts)))
    return out


# -- the chosen run over its history -----------------------------------------------------


def _total(per_step: Callable[[StepInputs], float]) -> Callable[[History], float]:
    """A counter of the chosen run: ``per_step`` summed over its history."""
    return lambda history: sum(per_step(s) for s in _chosen(history))


total_tokens = _total(_tokens)
total_seconds = _total(_seconds)
total_flops = _total(_flops)
k3_sum = _total(lambda s: float(_k3(_diff(s)).sum()))
k3_count = _total(lambda s: float(len(_diff(s))))


def _last(per_step: Callable[[StepInputs], float]) -> Reference:
    """A gauge of the chosen run: ``per_step`` of its last step."""
    return Reference(RUN_LABELS, lambda w: {RUN: per_step(_last_step(w.end))})


def _cumulative(value: Callable[[History], float]) -> Reference:
    """A gauge of the chosen run computed from its whole history."""
    return Reference(RUN_LABELS, lambda w: {RUN: value(w.end)})


def _rate(total: Callable[[History], float], by: tuple[str, ...] = RUN_LABELS) -> Reference:
    """``rate()`` of a counter over the window: its increase per second."""
    key = RUN if by == RUN_LABELS else ()
    return Reference(by, lambda w: {key: (total(w.end) - total(w.start)) / w.seconds})


def _sum(value: Callable[[History], float]) -> Reference:
    """One series without labels: ``value`` of the history at the evaluation time."""
    return Reference((), lambda w: {(): value(w.end)})


def _weighted_k3(w: Window) -> Values:
    return {RUN: (k3_sum(w.end) - k3_sum(w.start)) / (k3_count(w.end) - k3_count(w.start))}


def _bucket_totals(history: History) -> dict[float, float]:
    """The chosen run's cumulative logp_diff buckets: finite tokens with d <= each ``le``."""
    totals = dict.fromkeys((*DEFAULT_LOGP_DIFF_BOUNDS, math.inf), 0.0)
    for s in _chosen(history):
        d = _diff(s)
        for le in totals:
            totals[le] += float((d <= le).sum())
    return totals


def _bucket_increase(w: Window) -> Values:
    end, start = _bucket_totals(w.end), _bucket_totals(w.start)
    return {(le,): end[le] - start[le] for le in end}


def _per_layer(w: Window) -> Values:
    return {(str(layer),): v for layer, v in _max_over_ideal(_last_step(w.end)).items()}


def _per_expert(share: Callable[[np.ndarray], np.ndarray]) -> Reference:
    """A value per expert of :data:`LAYER` from its token counts."""

    def values(w: Window) -> Values:
        counts = _expert_counts(_last_step(w.end), LAYER)
        return {(str(e),): float(v) for e, v in enumerate(share(counts))}

    return Reference(("expert",), values)


# -- the telemetry path --------------------------------------------------------------------


def _senders(history: History) -> tuple[Sent, ...]:
    return history[-1].sent if history else ()


def requests(history: History) -> float:
    """Requests every sender got answered."""
    return float(sum(s.requests for s in _senders(history)))


def wire_points(history: History) -> float:
    """Data points of those requests, as OTLP counts them: with each request's step gauges."""
    return float(sum(s.points + len(STEP_METRICS) * s.requests for s in _senders(history)))


def rejected(history: History) -> float:
    """Points the collector rejects: none here. Every point these runs send maps, a
    histogram with a non-finite sum too (a run's ``ratio_outside_<t>`` at a step with a
    non-finite valid logprob, kept as sent so the NotFinite alerts can fire)."""
    del history
    return 0.0


def overflowed(history: History) -> float:
    """Points of the decoy's noise gauge past the series limit, every step."""
    return float(
        sum(
            max(0, inputs.noise_series - SERIES_LIMIT)
            for step in history
            for inputs in step.inputs.values()
        )
    )


def _by_sender(history: History, value: Callable[[Sent], float]) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for sent in _senders(history):
        key = (sent.job, sent.instance)
        out[key] = out.get(key, 0.0) + value(sent)
    return out


def _carried_points(history: History) -> dict[tuple, float]:
    """``rltel/otlp/points_exported`` as the latest requests carry it: the points of the
    requests before them (a request's health points are taken before it is sent)."""
    now = _by_sender(history, lambda s: 0.0)
    return {**now, **_by_sender(history[:-1], lambda s: float(s.points))}


def _carried_latency(history: History) -> dict[tuple, tuple[float, float]]:
    """Per instance: sum and count of the latencies the latest requests carried (those of
    every request before them)."""
    out: dict[tuple, tuple[float, float]] = {}
    for sent_before in (step.sent for step in history[:-1]):
        for s in sent_before:
            total, count = out.get((s.instance,), (0.0, 0.0))
            out[(s.instance,)] = (total + s.latency, count + 1)
    return out


def _points_per_sender(w: Window) -> Values:
    end, start = _carried_points(w.end), _carried_points(w.start)
    return {key: (end[key] - start.get(key, 0.0)) / w.seconds for key in end}


def _mean_latency(w: Window) -> Values:
    end, start = _carried_latency(w.end), _carried_latency(w.start)
    out = {}
    for key, (total, count) in end.items():
        total0, count0 = start.get(key, (0.0, 0.0))
        out[key] = (total - total0) / (count - count0)
    return out


def _zero_per_sender(by: tuple[str, ...]) -> Reference:
    """A health value that stays 0 on a healthy path, one series per sender group."""
    index = [("job", "instance").index(label) for label in by]
    return Reference(
        by,
        lambda w: {tuple(key[i] for i in index): 0.0 for key in _by_sender(w.end, lambda s: 0)},
    )


_SHARED_SINK_ZERO = Reference(("run", "sink"), lambda w: dict.fromkeys(SHARED_SINKS, 0.0))


# -- the panel targets -------------------------------------------------------------------

REFERENCES: dict[tuple[str, str, str], Reference] = {
    # throughput
    ("throughput", "Training tokens/s", "A"): _last(lambda s: _tokens(s) / _seconds(s)),
    ("throughput", "Training tokens/s", "B"): _cumulative(
        lambda h: total_tokens(h) / total_seconds(h)
    ),
    ("throughput", "Tokens/s from the total_tokens counter", "A"): _rate(total_tokens),
    ("throughput", "Total tokens", "A"): _sum(total_tokens),
    ("throughput", "Training share of wall time", "A"): _rate(total_seconds, by=()),
    ("throughput", "Window tokens", "A"): _sum(lambda h: _tokens(_last_step(h))),
    ("throughput", "Estimated FLOP/s", "A"): _last(lambda s: _flops(s) / _seconds(s)),
    ("throughput", "Estimated FLOP/s", "B"): _cumulative(
        lambda h: total_flops(h) / total_seconds(h)
    ),
    ("throughput", "Total estimated FLOPs", "A"): _sum(total_flops),
    ("throughput", "MFU", "A"): _last(lambda s: _flops(s) / (_seconds(s) * PEAK_FLOPS)),
    ("throughput", "MFU", "B"): _cumulative(
        lambda h: total_flops(h) / (total_seconds(h) * PEAK_FLOPS)
    ),
    ("throughput", "Training time per export window", "A"): _last(_seconds),
    ("throughput", "timeperf", "A"): Reference(
        ("__name__",), lambda w: {("timeperf_train_step_seconds",): w.end[-1].timeperf}
    ),
    ("throughput", "Slowest rank", "A"): Reference(  # one rank: rank 0 for every key
        ("__name__",),
        lambda w: {
            (f"{key}_slowest_rank",): 0.0
            for key in (
                "timeperf_train_step",
                "train_perf_seconds",
                "train_perf_tokens",
                "hardware_memory_peak_rss_bytes",
                "hardware_memory_rss_bytes",
                *(f"hardware_gpu_{reading}" for reading in GPU_READINGS),
            )
        },
    ),
    ("throughput", "Training time per rank: fastest and slowest", "A"): _last(_seconds),
    ("throughput", "Training time per rank: fastest and slowest", "B"): _last(_seconds),
    ("throughput", "Peak resident memory per rank", "A"): Reference(
        ("rank",), lambda w: {("0",): w.end[-1].peak_rss}
    ),
    **{("throughput", title, ref): _gpu(reading) for (title, ref), reading in GPU_PANELS.items()},
    # MoE balance
    ("moe_balance", "max_over_ideal: layer x time", "A"): Reference(("layer",), _per_layer),
    ("moe_balance", "Worst layer max_over_ideal", "A"): _sum(
        lambda h: max(_max_over_ideal(_last_step(h)).values())
    ),
    ("moe_balance", "max_over_ideal per layer", "A"): Reference(("layer",), _per_layer),
    ("moe_balance", "Expert load % (layer $layer): expert x time", "A"): _per_expert(
        lambda c: 100.0 * c / c.sum()
    ),
    ("moe_balance", "Expert load / ideal (layer $layer)", "A"): _per_expert(
        lambda c: c / (c.sum() / len(c))
    ),
    ("moe_balance", "Routed tokens per expert (layer $layer)", "A"): _per_expert(lambda c: c),
    # RL health
    ("rl_health", "KL estimators (last step)", "A"): _last(lambda s: np.mean(-_diff(s))),
    ("rl_health", "KL estimators (last step)", "B"): _last(lambda s: np.mean(_diff(s) ** 2 / 2)),
    ("rl_health", "KL estimators (last step)", "C"): _last(lambda s: np.mean(_k3(_diff(s)))),
    ("rl_health", "KL k3, token-weighted over the rate window", "A"): Reference(
        RUN_LABELS, _weighted_k3
    ),
    ("rl_health", "logp_diff avg / min / max", "A"): _last(lambda s: np.mean(_diff(s))),
    ("rl_health", "logp_diff avg / min / max", "B"): _last(lambda s: np.min(_diff(s))),
    ("rl_health", "logp_diff avg / min / max", "C"): _last(lambda s: np.max(_diff(s))),
    ("rl_health", "logp_diff avg / min / max", "D"): _last(lambda s: np.mean(np.abs(_diff(s)))),
    ("rl_health", "logp_diff distribution", "A"): Reference(("le",), _bucket_increase),
    ("rl_health", "Non-finite and overflow fractions", "A"): _last(lambda s: np.mean(~_finite(s))),
    ("rl_health", "Non-finite and overflow fractions", "B"): _last(
        lambda s: np.mean(np.isinf(np.expm1(_diff(s))))
    ),
    **{
        ("rl_health", "Probability ratio outside [1/t, t]", ref): _last(_ratio_outside(t))
        for ref, t in zip("ABCDE", TAIL_THRESHOLDS, strict=True)
    },
    ("rl_health", "Sample staleness (versions)", "A"): _last(
        lambda s: np.mean(s.version - _behaviour(s))
    ),
    ("rl_health", "Sample staleness (versions)", "B"): _last(
        lambda s: np.min(s.version - _behaviour(s))
    ),
    ("rl_health", "Sample staleness (versions)", "C"): _last(
        lambda s: np.max(s.version - _behaviour(s))
    ),
    ("rl_health", "Sample staleness (versions)", "D"): _last(
        lambda s: np.mean(s.version - 1 - _behaviour(s))
    ),
    ("rl_health", "Stale / future token fractions", "A"): _last(
        lambda s: np.mean(_behaviour(s) < s.version)
    ),
    ("rl_health", "Stale / future token fractions", "B"): _last(
        lambda s: np.mean(_behaviour(s) > s.version)
    ),
    ("rl_health", "Advantage sign fractions (tokens)", "A"): _last(
        lambda s: np.mean(_advantages(s) > 0)
    ),
    ("rl_health", "Advantage sign fractions (tokens)", "B"): _last(
        lambda s: np.mean(_advantages(s) < 0)
    ),
    ("rl_health", "Advantage sign fractions (tokens)", "C"): _last(
        lambda s: np.mean(_advantages(s) == 0)
    ),
    # pipeline
    ("pipeline", "Collector up", "A"): _sum(lambda h: 1.0),
    ("pipeline", "Runs", "A"): _sum(lambda h: float(len(h[-1].inputs))),
    ("pipeline", "Pending bytes", "A"): _sum(lambda h: 0.0),
    # the 10m window holds every scrape, the first one before any step (the counter at 0)
    ("pipeline", "Series overflow (10m)", "A"): _sum(overflowed),
    ("pipeline", "Export requests/s by gRPC code", "A"): Reference(
        ("code",), lambda w: {("OK",): (requests(w.end) - requests(w.start)) / w.seconds}
    ),
    ("pipeline", "Data points/s", "A"): _rate(wire_points, by=()),
    ("pipeline", "Data points/s", "B"): _rate(rejected, by=()),
    ("pipeline", "Sink queue depth", "A"): _SHARED_SINK_ZERO,
    ("pipeline", "Sink drops and failures/s", "A"): _SHARED_SINK_ZERO,
    ("pipeline", "Sink drops and failures/s", "B"): _SHARED_SINK_ZERO,
    ("pipeline", "Points/s per sender", "A"): Reference(("job", "instance"), _points_per_sender),
    ("pipeline", "Points/s per sender", "B"): _zero_per_sender(("job", "instance")),
    ("pipeline", "Points/s per sender", "C"): _zero_per_sender(("job", "instance")),
    ("pipeline", "Points/s per sender", "D"): _zero_per_sender(("job", "instance")),
    ("pipeline", "OTLP sink queue and spool", "A"): _zero_per_sender(("instance",)),
    ("pipeline", "OTLP sink queue and spool", "B"): _zero_per_sender(("instance",)),
    ("pipeline", "Export latency (mean over the rate window)", "A"): Reference(
        ("instance",), _mean_latency
    ),
}
"""(dashboard, panel title, target refId) -> the reference of that target."""
