"""Points from the real metric producers, as one training export would carry them."""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from exporters.otlp.sink import OtlpSink
from rltel.logger import CLOSED_METRIC, STEP_METRIC, StatsLogger
from telemetry.metrics.advantages import record_advantage_fractions
from telemetry.metrics.hardware import HardwareSource
from telemetry.metrics.moe import MoEBalance
from telemetry.metrics.staleness import record_version_stats
from telemetry.metrics.train_infer import record_train_infer
from telemetry.metrics.train_perf import TrainPerf
from telemetry.model.snapshot import Gauge, Point, Snapshot, Step
from telemetry.otlp.decode import Decoder
from telemetry.record.stats import Stats
from telemetry.record.tracker import DistributedStatsTracker
from telemetry.stats_tracker import export_sources
from tests.distributed import free_port
from tests.telemetry.otlp_receiver import Receiver

RESOURCE = (
    ("service.name", "rltel-trainer"),
    ("rltel.experiment", "exp"),
    ("rltel.role", "trainer"),
    ("rltel.rank", 0),
    ("host.name", "node0"),
)


def produced_points(
    logp_shift: float = 0.1, seed: int = 0, loss: float = 0.25, grad_norm: float = 1.5
) -> tuple[Point, ...]:
    """One export of every producer the dashboards read, on a 2x8 batch.

    Args:
        logp_shift: d = log p_trainer - log p_rollout on every valid token.
        seed: seeds the random logprobs and advantages.
        loss: the per-token loss on every valid token.
        grad_norm: the scalar gradient norm of the step.
    """
    tracker = DistributedStatsTracker()
    gen = torch.Generator().manual_seed(seed)
    rollout_logp = -torch.rand(2, 8, generator=gen, dtype=torch.float64) - 0.05
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 6:] = False
    with tracker.scope("ppo_actor"):
        record_train_infer(rollout_logp + logp_shift, rollout_logp, mask, tracker=tracker)
        record_advantage_fractions(torch.randn(2, 8, generator=gen), mask, tracker=tracker)
        with tracker.scope("update"):
            versions = 4 + torch.arange(16).reshape(2, 8) % 3
            record_version_stats(versions, 6, mask, tracker=tracker)
            tracker.denominator(n_valid_tokens=mask)
            # a run with both policy-loss keys: AReaL's actor_loss and a loop's own loss
            tracker.stat(loss=torch.full((2, 8), loss), denominator="n_valid_tokens")
            tracker.stat(actor_loss=torch.full((2, 8), loss), denominator="n_valid_tokens")
            tracker.scalar(grad_norm=grad_norm)
    with tracker.scope("rollout"):
        for reward in (0.25, 0.75):
            tracker.scalar(reward=reward)
    with tracker.record_timing("train_step"):
        pass
    perf = TrainPerf(lambda n: 1e6 * n, peak_flops_per_device=1e12, device="cpu", register=False)
    moe = MoEBalance(register=False)
    with perf.measure(mask), moe.training():
        moe.record(0, torch.tensor([0, 1, 1, 2, 3]), 4)  # max/ideal 1.6: healthy
        moe.record(1, torch.tensor([3, 3, 2, 1, 0]), 4)
    gpu = StepGpu()
    gpu.readings = GPU_READINGS
    hardware = HardwareSource(phase_memory=False, nvml=False, register=False, gpu=gpu)
    points = export_sources([tracker, perf, moe, hardware]).points
    return points + transport_points() + logger_points()


def moe_points(routing: dict[int, tuple[list[int], int]]) -> tuple[Point, ...]:
    """The real MoE balance producer's export for ``{layer: (chosen experts, num_experts)}``."""
    moe = MoEBalance(register=False)
    with moe.training():
        for layer, (experts, num_experts) in routing.items():
            moe.record(layer, torch.tensor(experts), num_experts)
    return export_sources([moe]).points


def snapshot(points: tuple[Point, ...], trial: str, step: int = 1) -> Snapshot:
    """A trainer Snapshot of ``points`` for run ``exp/<trial>``."""
    return Snapshot(
        points=points,
        step=Step(epoch=0, epoch_step=step, global_step=step),
        resource=(*RESOURCE, ("rltel.trial", trial)),
    )


@functools.cache
def logger_points() -> tuple[Point, ...]:
    """The StatsLogger's own points of a trainer over OTLP, decoded as the collector does.

    The step heartbeat of a commit at global_step 3, and the end marker of ``close()``.
    """
    with Receiver() as receiver, tempfile.TemporaryDirectory() as tmp:
        stats = StatsLogger({"fileroot": tmp, "otlp": {"endpoint": receiver.endpoint}})
        stats.commit(0, 3, 3, {})
        stats.close(10.0)
        requests = list(receiver.requests)
    decoder = Decoder()
    own = {
        point.metric: point
        for request in requests
        for decoded in decoder.decode(request).snapshots
        for point in decoded.points
        if point.metric in (STEP_METRIC, CLOSED_METRIC)
    }
    return tuple(own.values())


def transport_points() -> tuple[Point, ...]:
    """The health points a real OTLP sink adds to each export (nothing sent yet)."""
    sink = OtlpSink(f"127.0.0.1:{free_port()}", timeout_s=0.5)
    try:
        return tuple(sink.health_points())
    finally:
        sink.shutdown()


def flops_estimate(length: int) -> float:
    """The FLOPs estimator of :class:`TrainingRun`: training FLOPs of one sequence."""
    return 6e6 * length + 2e3 * length * length


PEAK_FLOPS = 1e12
"""Peak FLOP/s per device of :class:`TrainingRun` (one rank, one device)."""


class ManualEvents:
    """``torch.cuda``'s timing calls on a clock the caller advances, in milliseconds."""

    def __init__(self) -> None:
        self.now_ms = 0.0

    def current_stream(self) -> None:
        return None

    def Event(self, enable_timing: bool = False) -> _ManualEvent:
        return _ManualEvent(self)


class _ManualEvent:
    def __init__(self, clock: ManualEvents) -> None:
        self.clock = clock
        self.ms = math.nan

    def record(self, stream: None) -> None:
        self.ms = self.clock.now_ms

    def synchronize(self) -> None:
        """The manual clock has nothing to wait for."""

    def elapsed_time(self, end: _ManualEvent) -> float:
        return end.ms - self.ms


@dataclass(frozen=True)
class StepInputs:
    """What one training step records: the producers' inputs, as the references read them."""

    trainer_logp: torch.Tensor
    rollout_logp: torch.Tensor
    mask: torch.Tensor
    """Generation, loss and attention mask (bool)."""
    advantages: torch.Tensor
    versions: torch.Tensor
    """Behaviour version of each token (-1: unknown)."""
    version: int
    """The current version; the proximal one is ``version - 1``."""
    batch_ms: tuple[float, ...]
    """train_batch time of each micro-batch (the rows split evenly)."""
    routing: dict[int, tuple[list[int], int]]
    """MoE: layer -> (the expert chosen for each token, number of experts)."""
    noise_series: int = 0
    """Series of one high-cardinality gauge (``noise/level`` per ``shard``)."""
    gpu: Mapping[str, float] = field(default_factory=dict)
    """The GPU readings of the step (NVML's names), as :class:`StepGpu` serves them."""


GPU_READINGS = {
    "utilization_percent": 87.0,
    "memory_used_bytes": 61.5 * 2**30,
    "memory_free_ratio": 0.25,
    "power_watts": 412.0,
    "temperature_celsius": 71.0,
    "sm_clock_mhz": 1755.0,
    "throttle_thermal": 0.0,
    "throttle_power": 0.0,
}
"""One GPU's readings with NVML's names and units (an H100-like device, not throttled:
nothing in :func:`produced_points` but the KL of a high logprob shift alerts)."""


class StepGpu:
    """The GPU of a CPU-only test: it reads what the current step's inputs name (NVML's
    reading names), so the GPU series take the real path from the hardware source on."""

    def __init__(self) -> None:
        self.readings: Mapping[str, float] = {}

    def read(self) -> dict[str, float]:
        return dict(self.readings)


class TrainingRun:
    """One run's real producers, kept across steps: counters and histograms keep growing.

    train_perf times the batches with :class:`ManualEvents`, so its seconds are the chosen
    ``batch_ms``; ``timeperf/train_step`` is measured wall time.
    """

    def __init__(self) -> None:
        self.tracker = DistributedStatsTracker()
        self.clock = ManualEvents()
        self.perf = TrainPerf(
            flops_estimate,
            peak_flops_per_device=PEAK_FLOPS,
            device="cpu",
            events=self.clock,
            register=False,
        )
        self.moe = MoEBalance(register=False)
        self.gpu = StepGpu()
        self.hardware = HardwareSource(phase_memory=False, nvml=False, register=False, gpu=self.gpu)

    def step(self, inputs: StepInputs) -> Stats:
        """Record one step and export it (one reduction, as ``export_all``)."""
        tracker = self.tracker
        with tracker.record_timing("train_step"):
            with tracker.scope("ppo_actor"):
                record_train_infer(
                    inputs.trainer_logp, inputs.rollout_logp, inputs.mask, tracker=tracker
                )
                record_advantage_fractions(inputs.advantages, inputs.mask, tracker=tracker)
                with tracker.scope("update"):
                    record_version_stats(
                        inputs.versions,
                        inputs.version,
                        inputs.mask,
                        proximal_version=inputs.version - 1,
                        tracker=tracker,
                    )
            parts = torch.tensor_split(inputs.mask, len(inputs.batch_ms))
            with self.moe.training():
                for part, ms in zip(parts, inputs.batch_ms):
                    with self.perf.measure(part):
                        self.clock.now_ms += ms
                for layer, (experts, num_experts) in inputs.routing.items():
                    self.moe.record(layer, torch.tensor(experts), num_experts)
        noise = tuple(
            Gauge("noise/level", float(i), attributes=(("shard", i),))
            for i in range(inputs.noise_series)
        )
        self.gpu.readings = inputs.gpu
        sources = [tracker, self.perf, self.moe, self.hardware]
        return Stats(export_sources(sources).points + noise)
