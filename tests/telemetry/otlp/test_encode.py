"""Encoder: what a real OTLP/gRPC receiver gets for each point kind, splitting, plain types."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult

from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)
from telemetry.otlp.encode import Batch, count_nonfinite, encode, plain_attribute, split
from tests.telemetry.otlp_receiver import (
    Receiver,
    attributes_of,
    data_points,
    metrics_of,
    point_count,
    resource_of,
    step_of,
)

DELTA, CUMULATIVE = 1, 2
RESOURCE = (
    ("service.name", "rltel"),
    ("rltel.experiment", "exp"),
    ("rltel.trial", "t1"),
    ("rltel.role", "trainer"),
    ("rltel.rank", 0),
    ("host.name", "h"),
)
BOUNDS = (-1.0, -0.1, 0.0, 0.1, 1.0)


def masked_histogram(metric: str, seed: int) -> tuple[Histogram, np.ndarray]:
    """A histogram point built from numpy data, and the valid values it summarises."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=200)
    valid = values[rng.random(200) < 0.4]
    index = np.searchsorted(np.array(BOUNDS), valid, side="left")  # (b[i-1], b[i]]
    buckets = np.bincount(index, minlength=len(BOUNDS) + 1)
    point = Histogram(
        metric,
        count=np.int64(valid.size),
        sum=np.float64(valid.sum()),
        min=np.float64(valid.min()),
        max=np.float64(valid.max()),
        bounds=BOUNDS,
        bucket_counts=tuple(buckets),
        unit="1",
    )
    return point, valid


def send(data) -> None:
    exporter = OTLPMetricExporter(endpoint=RECEIVER.endpoint, insecure=True, timeout=5)
    try:
        assert exporter.export(data) is MetricExportResult.SUCCESS
    finally:
        exporter.shutdown()


RECEIVER = Receiver()


@pytest.fixture(scope="module", autouse=True)
def receiver():
    with RECEIVER:
        yield RECEIVER


def test_every_point_kind_arrives_as_the_wire_contract_says():
    hist, valid = masked_histogram("ppo_actor/update/importance_weight", 0)
    snapshot = Snapshot(
        points=(
            hist,
            Histogram("ppo_actor/update/empty", count=0, sum=0.0, reduce=StatReduce.AVG),
            ScalarMean("ppo_actor/task_reward", np.float32(0.75), count=np.int64(12)),
            Gauge("train_perf/throughput", 1234.5, unit="{token}/s"),
            Counter("train_perf/tokens", 1e6, unit="{token}", start_time_unix_nano=7),
            Counter("train_perf/seconds", 30.0, unit="s"),
            Gauge(
                "moe_balance/max_over_ideal",
                1.5,
                attributes=(("layer", np.int64(3)), ("expert", torch.tensor(5))),
            ),
        ),
        step=Step(epoch=2, epoch_step=7, global_step=107),
        resource=RESOURCE,
        time_unix_nano=5_000,
        stream="train",
    )
    before = len(RECEIVER.requests)
    (data,) = encode(snapshot, window_start_unix_nano=4_000, start_unix_nano=1_000)
    send(data)
    (request,) = RECEIVER.requests[before:]
    assert resource_of(request) == {**dict(RESOURCE), "rltel.stream": "train"}
    metrics = metrics_of(request)

    m = metrics["ppo_actor/update/importance_weight"]
    assert m.description == "rltel.reduce=avg_min_max" and m.unit == "1"
    assert m.histogram.aggregation_temporality == DELTA
    (p,) = m.histogram.data_points
    assert p.count == valid.size and p.sum == pytest.approx(valid.sum(), rel=1e-12)
    assert p.min == valid.min() and p.max == valid.max()
    assert list(p.explicit_bounds) == list(BOUNDS)
    edges = [-math.inf, *BOUNDS, math.inf]
    reference = [int(((valid > lo) & (valid <= hi)).sum()) for lo, hi in itertools.pairwise(edges)]
    assert list(p.bucket_counts) == reference and sum(reference) == valid.size
    assert (p.start_time_unix_nano, p.time_unix_nano) == (4_000, 5_000)

    m = metrics["ppo_actor/update/empty"]
    assert m.description == "rltel.reduce=avg"
    (p,) = m.histogram.data_points
    assert p.count == 0 and not p.HasField("min") and not p.HasField("max")

    m = metrics["ppo_actor/task_reward"]
    assert m.description == "rltel.reduce=scalar"
    assert m.histogram.aggregation_temporality == DELTA
    (p,) = m.histogram.data_points
    assert p.count == 12 and p.sum == pytest.approx(0.75 * 12)
    assert not p.HasField("min") and not list(p.bucket_counts)

    m = metrics["train_perf/throughput"]
    assert m.WhichOneof("data") == "gauge" and m.unit == "{token}/s"
    (p,) = m.gauge.data_points
    assert p.WhichOneof("value") == "as_double" and p.as_double == 1234.5

    m = metrics["train_perf/tokens"]
    assert m.sum.is_monotonic and m.sum.aggregation_temporality == CUMULATIVE
    (p,) = m.sum.data_points
    assert p.as_double == 1e6 and p.start_time_unix_nano == 7
    (p,) = metrics["train_perf/seconds"].sum.data_points
    assert p.start_time_unix_nano == 1_000  # no start of its own: the process start

    (p,) = metrics["moe_balance/max_over_ideal"].gauge.data_points
    assert attributes_of(p) == {"layer": 3, "expert": 5}
    assert [kv.value.WhichOneof("value") for kv in p.attributes] == ["int_value", "int_value"]

    assert step_of(request) == 107
    (epoch,) = metrics["train.epoch"].gauge.data_points
    (epoch_step,) = metrics["train.epoch_step"].gauge.data_points
    assert (epoch.as_int, epoch_step.as_int, epoch.time_unix_nano) == (2, 7, 5_000)
    keys = {kv.key for m in metrics.values() for pt in data_points(m) for kv in pt.attributes}
    assert keys == {"layer", "expert"}  # the step is never a data-point attribute


def test_cumulative_scalars_for_rollout_workers():
    snapshot = Snapshot(
        (ScalarMean("rollout/reward", 0.5, count=40),),
        resource=(("rltel.role", "rollout"), ("rltel.worker_id", "w3")),
        time_unix_nano=9_000,
        stream="rollout",
    )
    (data,) = encode(
        snapshot, window_start_unix_nano=8_000, start_unix_nano=100, cumulative_scalars=True
    )
    request = encode_metrics(data)
    m = metrics_of(request)["rollout/reward"]
    assert m.histogram.aggregation_temporality == CUMULATIVE
    (p,) = m.histogram.data_points
    assert (p.start_time_unix_nano, p.count, p.sum) == (100, 40, 20.0)
    assert "train.step" not in metrics_of(request)  # no step: no step gauges
    assert resource_of(request)["rltel.stream"] == "rollout"


def test_large_snapshot_splits_under_the_point_and_size_limits():
    layers, experts = 48, 128  # per-expert MoE loads: 6144 points, plus histograms
    points = [
        Gauge(
            "moe_balance/expert_load",
            float(layer * experts + expert) / 1e4,
            unit="1",
            attributes=(("layer", layer), ("expert", expert)),
        )
        for layer in range(layers)
        for expert in range(experts)
    ]
    points += [masked_histogram(f"h/{i}", i)[0] for i in range(500)]
    snapshot = Snapshot(tuple(points), Step(0, 3, 3), RESOURCE, 1, "train")
    datas = encode(snapshot, max_points=1000)
    assert len(datas) == math.ceil(len(points) / 997)
    seen = []
    before = len(RECEIVER.requests)
    for data in datas:
        request = encode_metrics(data)
        assert point_count(request) <= 1000
        assert request.ByteSize() < 4 * 1024 * 1024
        send(data)
    for request in RECEIVER.requests[before:]:
        assert step_of(request) == 3
        for name, metric in metrics_of(request).items():
            if not name.startswith("train."):
                seen += [
                    (name, tuple(sorted(attributes_of(p).items()))) for p in data_points(metric)
                ]
    expected = [(p.metric, tuple(sorted(p.attributes))) for p in points]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))


def test_split_keeps_order_and_rejects_a_limit_without_room():
    snapshot = Snapshot(tuple(Gauge(f"g{i}", float(i)) for i in range(10)), Step(0, 0, 0))
    parts = split(Batch(snapshot), max_points=7)
    assert [len(p.snapshot.points) for p in parts] == [4, 4, 2]
    assert [pt for p in parts for pt in p.snapshot.points] == list(snapshot.points)
    with pytest.raises(ValueError, match="max_points"):
        split(Batch(snapshot), max_points=3)
    assert len(split(Batch(Snapshot(snapshot.points)), max_points=5)) == 2  # no step gauges


def test_plain_attribute_casts_numpy_and_torch_scalars():
    cases = [
        (np.int64(3), 3, int),
        (np.float32(0.5), 0.5, float),
        (np.bool_(True), True, bool),
        (torch.tensor(7), 7, int),
        (torch.tensor(2.5), 2.5, float),
        (True, True, bool),
        ("x", "x", str),
        (torch.ones(2), "tensor([1., 1.])", str),
    ]
    for value, expected, kind in cases:
        out = plain_attribute(value)
        assert out == expected and type(out) is kind, value


def test_nonfinite_values_are_sent_as_they_are_and_counted():
    points = (
        Gauge("a", math.nan),
        ScalarMean("b", math.inf, count=3),
        Counter("c", 1.0),
        Histogram("d", count=2, sum=-math.inf, min=-math.inf, max=1.0),
    )
    assert count_nonfinite(points) == sum(
        not math.isfinite(v) for v in (math.nan, math.inf, 1.0, -math.inf, -math.inf, 1.0)
    )
    (data,) = encode(Snapshot(points, time_unix_nano=1))
    before = len(RECEIVER.requests)
    send(data)
    metrics = metrics_of(RECEIVER.requests[before])
    assert math.isnan(metrics["a"].gauge.data_points[0].as_double)
    assert metrics["b"].histogram.data_points[0].sum == math.inf
    (d,) = metrics["d"].histogram.data_points
    assert d.sum == -math.inf and d.min == -math.inf and d.max == 1.0
