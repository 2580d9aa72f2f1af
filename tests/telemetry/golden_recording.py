"""A fixed recording through every producer, and the OTLP request bytes it encodes to.

Every point kind the training side emits is produced here by the real producers (the
tracker's stats of every reduce type with and without buckets, scalars, denominators,
timings and their straggler view, a named tracker, train/infer moments, MoE balance,
train_perf's gauges and counters, Twinkle metrics) and encoded with fixed timestamps, so
the bytes change only when a point changes. ``python -m tests.telemetry.golden_recording``
prints the digest; ``--write`` rewrites the golden text next to this file.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch
from google.protobuf import text_format
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from telemetry import stats_tracker
from telemetry.metrics.moe import MoEBalance
from telemetry.metrics.train_infer import record_train_infer
from telemetry.metrics.train_perf import TrainPerf
from telemetry.metrics.twinkle import Accuracy, GRPOMetric, LossMetric
from telemetry.model.snapshot import Counter, Gauge, ScalarMean, Snapshot, Step
from telemetry.otlp.encode import encode

GOLDEN = Path(__file__).with_name("golden_points.txtpb")
RESOURCE = (("service.name", "rltel"), ("rltel.experiment", "golden"), ("rltel.rank", 0))
ReduceType = stats_tracker.ReduceType
SERIES = ("timeperf/*", "train_perf")
TIME, WINDOW_START, START = 1_700_000_000_000_000_000, 1_699_999_999_000_000_000, 5


class _Stream:
    pass


class _Event:
    def __init__(self, clock: _Clock) -> None:
        self.clock, self.ms = clock, 0.0

    def record(self, stream: _Stream) -> None:
        self.ms = self.clock.now_ms

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return end.ms - self.ms


class _Clock:
    """``torch.cuda``'s event timing on a manual clock: each batch takes 250 ms."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.stream = _Stream()

    def current_stream(self) -> _Stream:
        return self.stream

    def Event(self, enable_timing: bool = False) -> _Event:
        self.now_ms += 125.0
        return _Event(self)


def _record_tracker(tracker: stats_tracker.DistributedStatsTracker, gen: torch.Generator) -> None:
    mask = torch.rand(4, 16, generator=gen) < 0.6
    values = {f"v{i}": torch.randn(4, 16, generator=gen, dtype=torch.float64) for i in range(6)}
    with tracker.scope("ppo_actor"):
        tracker.set_bucket_bounds("bucketed", (-1.0, 0.0, 0.5, 2.0))
        tracker.denominator(n_valid_tokens=mask, n_seqs=torch.ones(4, dtype=torch.bool))
        tracker.stat(denominator="n_valid_tokens", loss=values["v0"], bucketed=values["v1"])
        kinds = (ReduceType.AVG, ReduceType.SUM, ReduceType.MIN, ReduceType.MAX)
        for i, reduce in enumerate(kinds, 2):
            tracker.stat(
                denominator="n_valid_tokens",
                reduce_type=reduce,
                **{f"{reduce.value}_stat": values[f"v{i}"]},
            )
        tracker.stat(denominator="n_seqs", seq_reward=torch.arange(4, dtype=torch.float32))
        tracker.scalar(lr=3e-4, grad_norm=torch.tensor(1.25), clipped=True)
        tracker.scalar(grad_norm=0.75)
        with tracker.disable_scope():
            tracker.scalar(**{"timeperf/train_step": 0.5})
        with tracker.scope("timeperf"):
            tracker.scalar(inner=0.125)
        trainer = torch.randn(3, 8, generator=gen, dtype=torch.float64) - 1.0
        rollout = trainer + 0.05 * torch.randn(3, 8, generator=gen, dtype=torch.float64)
        record_train_infer(trainer, rollout, torch.rand(3, 8, generator=gen) < 0.8, tracker)


def recording() -> Snapshot:
    """The fixed recording's export, as one Snapshot with fixed timestamps."""
    gen = torch.Generator().manual_seed(7)
    tracker = stats_tracker.DistributedStatsTracker()
    named = stats_tracker.DistributedStatsTracker("rollout")
    _record_tracker(tracker, gen)
    named.scalar(reward=0.25, accepted=1)
    named.scalar(reward=0.75)
    moe = MoEBalance(register=False)
    moe.add_layer(0, 4)
    moe.record(1, torch.tensor([[0, 1], [1, 2], [1, -1], [3, 3]]), 4)
    moe.record(1, torch.tensor([0, 4, 2]), 4)
    perf = TrainPerf(
        lambda length: 6.0e6 * length, peak_flops_per_device=1e12, num_devices=2,
        device="cpu", events=_Clock(), register=False,
    )  # fmt: skip
    perf.start_time_unix_nano = START
    for lengths in ([7, 9], [16]):
        with perf.measure(seq_lens=lengths):
            pass
    grpo = GRPOMetric(epsilon=0.2, temperature=0.7, top_k_kl=2, prefix="twinkle/")
    labels = torch.randint(0, 5, (3, 6), generator=gen)
    labels[torch.rand(3, 6, generator=gen) < 0.3] = -100
    new = -torch.rand(3, 6, generator=gen, dtype=torch.float64)
    old = new + 0.1 * torch.randn(3, 6, generator=gen, dtype=torch.float64)
    advantages = torch.randn(3, generator=gen, dtype=torch.float64)
    grpo.accumulate({"labels": labels}, {"logps": new}, old_logps=old, advantages=advantages)
    loss = LossMetric(prefix="twinkle/")
    for value in (2.0, 3.5):
        loss.accumulate(None, {"loss": torch.tensor(value)})
    accuracy = Accuracy(prefix="twinkle/")
    accuracy.accumulate(
        {"labels": torch.tensor([[1, 2, -100]])}, {"logits": torch.eye(3)[None, [1, 0, 2]]}
    )
    stats_tracker.rank_series(*SERIES)
    try:
        stats = stats_tracker.export_sources([tracker, named, moe, perf, grpo, loss, accuracy])
    finally:
        stats_tracker.rank_series(*SERIES, enabled=False)
    extra = (
        Counter("rollout/samples", 42.0, "{sample}", start_time_unix_nano=START),
        Gauge("eval/score", 0.5, attributes=(("task", "gsm8k"), ("shot", 4))),
        ScalarMean("rollout/latency", 0.2, count=8, unit="s"),
    )
    return Snapshot(stats.points + extra, Step(3, 1, 2), RESOURCE, TIME, "train")


def request_bytes() -> bytes:
    """The fixed recording as one OTLP request, serialised deterministically."""
    (data,) = encode(recording(), window_start_unix_nano=WINDOW_START, start_unix_nano=START)
    return encode_metrics(data).SerializeToString(deterministic=True)


def as_text(payload: bytes) -> str:
    """The request in protobuf text format (what the golden file holds)."""
    return text_format.MessageToString(ExportMetricsServiceRequest.FromString(payload))


if __name__ == "__main__":
    payload = request_bytes()
    if sys.argv[1:] == ["--write"]:
        GOLDEN.write_text(as_text(payload))
    print(hashlib.sha256(payload).hexdigest(), len(payload))
