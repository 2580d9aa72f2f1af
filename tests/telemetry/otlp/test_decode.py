"""Decoder: rltel's wire contract round trip and every standard OTel point kind."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View

from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)
from telemetry.otlp.decode import Decoder
from telemetry.otlp.encode import encode
from telemetry.otlp.values import LabelLimits

RES = (("rltel.experiment", "e"), ("rltel.trial", "t"), ("rltel.role", "trainer"))


def request_of(snapshot: Snapshot, **kwargs) -> ExportMetricsServiceRequest:
    (data,) = encode(snapshot, **kwargs)
    return encode_metrics(data)


def kv(**attrs) -> list[KeyValue]:
    out = []
    for key, value in attrs.items():
        if isinstance(value, str):
            out.append(KeyValue(key=key, value=AnyValue(string_value=value)))
        elif isinstance(value, float):
            out.append(KeyValue(key=key, value=AnyValue(double_value=value)))
        else:
            out.append(KeyValue(key=key, value=AnyValue(int_value=value)))
    return out


def raw(*metrics: pb.Metric, resource: dict | None = None) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    rm.resource.attributes.extend(kv(**(resource or {"service.name": "foreign"})))
    rm.scope_metrics.add().metrics.extend(metrics)
    return request


def test_rltel_round_trip_restores_reduce_types_scalars_and_step():
    points = (
        Histogram("ppo_actor/update/loss", 10, 5.0, -1.0, 2.0, (0.0, 1.0), (3, 5, 2)),
        Histogram("ppo_actor/entropy", 4, 8.0, 1.0, 3.0, reduce=StatReduce.AVG),
        Histogram("ppo_actor/n_tokens", 4, 100.0, 1.0, 50.0, reduce=StatReduce.SUM),
        Histogram("ppo_actor/empty", 0, 0.0),
        ScalarMean("grad_norm", 1.5, count=3),
        Gauge("lr", 0.001),
        Counter("train_perf/tokens", 1234.0, "{token}", start_time_unix_nano=5),
        Gauge("moe_balance/max_over_ideal", 1.25, attributes=(("layer", 3),)),
    )
    snap = Snapshot(points, Step(2, 7, 42), RES, time_unix_nano=10**18, stream="train")
    result = Decoder().decode(request_of(snap, window_start_unix_nano=1))
    assert (result.accepted, result.rejected) == (len(points) + 3, 0)
    (got,) = result.snapshots
    assert got.step == Step(2, 7, 42)
    assert got.stream == "train"
    assert got.time_unix_nano == 10**18
    assert dict(got.resource)["rltel.experiment"] == "e"
    assert snap.flat(include_counts=True) == got.flat(include_counts=True)
    by_key = {p.key: p for p in got.points}
    assert by_key["ppo_actor/update/loss"] == points[0]
    assert by_key["ppo_actor/n_tokens"].reduce is StatReduce.SUM
    assert by_key["grad_norm"] == ScalarMean("grad_norm", 1.5, 3)
    assert by_key["train_perf/tokens"] == points[6]
    assert by_key["moe_balance/layer_3/max_over_ideal"].value == 1.25


def test_rollout_cumulative_scalars_become_windows_with_restart_as_reset():
    decoder = Decoder(started_ns=100)
    res = (*RES[:2], ("rltel.role", "rollout"), ("rltel.worker_id", "w0"))
    rewards = [[0.5, 1.0], [0.0], [2.0, 2.0, 2.0]]
    total, count, got = 0.0, 0, []
    for i, batch in enumerate(rewards):
        total += sum(batch)
        count += len(batch)
        snap = Snapshot(
            (ScalarMean("rollout/reward", total / count, count),), None, res, 1000 + i, "rollout"
        )
        req = request_of(snap, start_unix_nano=200, cumulative_scalars=True)
        got.extend(decoder.decode(req).snapshots)
    assert all(s.stream == "rollout" for s in got)
    assert [s.points[0].value for s in got] == pytest.approx([np.mean(b) for b in rewards])
    assert [s.points[0].count for s in got] == [len(b) for b in rewards]
    # the worker restarts: new start time, smaller totals -> a window of its own
    snap = Snapshot((ScalarMean("rollout/reward", 0.25, 2),), None, res, 2000, "rollout")
    (after,) = decoder.decode(
        request_of(snap, start_unix_nano=300, cumulative_scalars=True)
    ).snapshots
    assert (after.points[0].value, after.points[0].count) == (0.25, 2)


def test_first_cumulative_point_older_than_collector_is_only_a_baseline():
    decoder = Decoder(started_ns=10**9)
    res = (*RES[:2], ("rltel.role", "rollout"))
    snap = Snapshot((ScalarMean("r", 1.0, 4),), None, res, 2 * 10**9, "rollout")
    first = decoder.decode(request_of(snap, start_unix_nano=5, cumulative_scalars=True))
    assert first.accepted == 1 and first.snapshots[0].points == ()
    snap = Snapshot(
        (ScalarMean("r", 2.0, 6),), None, res, 3 * 10**9, "rollout"
    )  # sum 12 = 4 + 8 over 2
    second = decoder.decode(request_of(snap, start_unix_nano=5, cumulative_scalars=True))
    assert second.snapshots[0].points == (ScalarMean("r", 4.0, 2),)


def number_metric(name, kind, values, *, monotonic=True, temporality=2, as_int=False, start=1):
    metric = pb.Metric(name=name, unit="1")
    data = metric.gauge if kind == "gauge" else metric.sum
    if kind == "sum":
        data.is_monotonic = monotonic
        data.aggregation_temporality = temporality
    for i, value in enumerate(values):
        point = data.data_points.add(start_time_unix_nano=start, time_unix_nano=10 + i)
        point.attributes.extend(kv(host="a"))
        if as_int:
            point.as_int = value
        else:
            point.as_double = value
    return metric


def test_sums_and_gauges_of_any_temporality_and_number_type():
    decoder = Decoder()
    metrics = [
        number_metric("c_cum", "sum", [7], as_int=True),
        number_metric("c_delta", "sum", [3.0, 4.5], temporality=1),
        number_metric("updown", "sum", [-2], monotonic=False, as_int=True),
        number_metric("updown_delta", "sum", [5.0, -2.0], monotonic=False, temporality=1),
        number_metric("g", "gauge", [1.5]),
        number_metric("g_int", "gauge", [9], as_int=True),
    ]
    result = decoder.decode(raw(*metrics))
    assert result.rejected == 0
    points = result.snapshots[0].points
    assert points[0] == Counter("c_cum", 7.0, "1", (("host", "a"),), 1)
    assert [p.value for p in points if p.metric == "c_delta"] == [3.0, 7.5]
    assert all(isinstance(p, Counter) for p in points if p.metric == "c_delta")
    assert [p.value for p in points if p.metric == "updown"] == [-2.0]
    assert [p.value for p in points if p.metric == "updown_delta"] == [5.0, 3.0]
    assert all(isinstance(p, Gauge) for p in points if p.metric.startswith(("updown", "g")))
    assert [p.value for p in points if p.metric.startswith("g")] == [1.5, 9.0]
    again = decoder.decode(raw(number_metric("c_delta", "sum", [0.5], temporality=1)))
    assert again.snapshots[0].points[0].value == 8.0  # running total per series
    assert again.snapshots[0].stream == "train"


def test_cumulative_histogram_windows_buckets_and_extremes():
    decoder = Decoder(started_ns=0)

    def hist(count, total, buckets, low, high):
        metric = pb.Metric(name="latency", unit="s")
        metric.histogram.aggregation_temporality = 2
        point = metric.histogram.data_points.add(
            start_time_unix_nano=5, time_unix_nano=9, count=count, sum=total
        )
        point.explicit_bounds.extend([1.0, 2.0])
        point.bucket_counts.extend(buckets)
        point.min, point.max = low, high
        return raw(metric)

    first = decoder.decode(hist(3, 3.0, [2, 1, 0], 0.5, 1.5)).snapshots[0].points[0]
    assert (first.count, first.sum, first.bucket_counts) == (3, 3.0, (2, 1, 0))
    second = decoder.decode(hist(5, 9.0, [2, 1, 2], 0.5, 3.0)).snapshots[0].points[0]
    assert (second.count, second.sum, second.bucket_counts) == (2, 6.0, (0, 0, 2))
    assert (second.min, second.max) == (None, 3.0)  # only the moved extreme is known
    assert second.reduce is StatReduce.AVG_MIN_MAX
    same = decoder.decode(hist(5, 9.0, [2, 1, 2], 0.5, 3.0)).snapshots[0].points[0]
    assert (same.count, same.bounds, same.bucket_counts) == (0, (1.0, 2.0), (0, 0, 0))


def test_exponential_histogram_buckets_match_numpy():
    reader = InMemoryMetricReader()
    view = View(instrument_name="x", aggregation=ExponentialBucketHistogramAggregation(20))
    provider = MeterProvider(metric_readers=[reader], views=[view])
    values = np.random.default_rng(0).lognormal(0.0, 1.5, 300)
    values = np.concatenate([values, [0.0, 0.0]])
    histogram = provider.get_meter("t").create_histogram("x")
    for value in values:
        histogram.record(float(value))
    request = encode_metrics(reader.get_metrics_data())
    provider.shutdown()
    (point,) = Decoder(started_ns=0).decode(request).snapshots[0].points
    assert point.count == len(values)
    assert point.sum == pytest.approx(values.sum())
    assert (point.min, point.max) == (values.min(), values.max())
    edges = [-math.inf, *point.bounds, math.inf]
    assert len(point.bounds) > 10
    # exponential buckets are (lower, upper]; the SDK maps values by logarithm, so a
    # value within float rounding of an edge may land one bucket over
    pairs = itertools.pairwise(edges)
    expected = [int(((values > lo) & (values <= hi)).sum()) for lo, hi in pairs]
    assert sum(point.bucket_counts) == len(values)
    assert np.abs(np.array(point.bucket_counts) - np.array(expected)).sum() <= 2


def test_exponential_negative_and_zero_buckets():
    metric = pb.Metric(name="e")
    metric.exponential_histogram.aggregation_temporality = 1
    point = metric.exponential_histogram.data_points.add(count=9, sum=1.0, scale=0, zero_count=2)
    point.negative.offset, point.positive.offset = 1, -1
    point.negative.bucket_counts.extend([1, 2])  # magnitudes in (2, 4]: 1, in (4, 8]: 2
    point.positive.bucket_counts.extend([3, 1])  # (0.5, 1]: 3, (1, 2]: 1
    (got,) = Decoder().decode(raw(metric)).snapshots[0].points
    assert got.bounds == (-8.0, -4.0, -2.0, 0.0, 0.5, 1.0, 2.0)
    assert got.bucket_counts == (0, 2, 1, 2, 0, 3, 1, 0)


def test_summary_maps_to_quantile_gauges_and_counters():
    metric = pb.Metric(name="rpc")
    point = metric.summary.data_points.add(time_unix_nano=3, count=10, sum=25.0)
    point.quantile_values.add(quantile=0.5, value=2.0)
    point.quantile_values.add(quantile=0.99, value=9.0)
    points = Decoder().decode(raw(metric)).snapshots[0].points
    assert Gauge("rpc", 2.0, attributes=(("quantile", "0.5"),)) in points
    assert Gauge("rpc", 9.0, attributes=(("quantile", "0.99"),)) in points
    assert Counter("rpc_count", 10.0) in points and Counter("rpc_sum", 25.0) in points


def test_unmappable_points_are_counted_as_partial_success():
    bad_buckets = pb.Metric(name="h")
    bad_buckets.histogram.aggregation_temporality = 1
    p = bad_buckets.histogram.data_points.add(count=3, sum=1.0)
    p.explicit_bounds.extend([1.0])
    p.bucket_counts.extend([1, 1, 1])  # 3 buckets for 1 bound
    no_value = pb.Metric(name="g")
    no_value.gauge.data_points.add()
    negative = number_metric("c", "sum", [-1.0])
    inf_bound = pb.Metric(name="h2")
    inf_bound.histogram.aggregation_temporality = 1
    p = inf_bound.histogram.data_points.add(count=1, sum=1.0)
    p.explicit_bounds.extend([1.0, math.inf])
    p.bucket_counts.extend([1, 0, 0])
    good = number_metric("ok", "gauge", [1.0])
    result = Decoder().decode(raw(bad_buckets, no_value, negative, inf_bound, pb.Metric(), good))
    assert (result.accepted, result.rejected) == (1, 5)
    assert "'h'" in result.message and "'c'" in result.message
    assert "'h2': histogram bounds are not finite" in result.message
    assert result.snapshots[0].points == (Gauge("ok", 1.0, unit="1", attributes=(("host", "a"),)),)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_histogram_sum_is_kept_as_sent(bad):
    """A NaN loss or an infinite KL k3 reaches the sinks as the embedded path shows it."""
    delta = pb.Metric(name="loss", description="rltel.reduce=avg_min_max")
    delta.histogram.aggregation_temporality = 1
    delta.histogram.data_points.add(count=3, sum=bad, min=0.5, max=bad)
    buckets = pb.Metric(name="kl")
    buckets.histogram.aggregation_temporality = 1
    p = buckets.histogram.data_points.add(count=2, sum=bad, min=0.1, max=bad)
    p.explicit_bounds.extend([1.0])
    p.bucket_counts.extend([1, 1])
    expo = pb.Metric(name="e")
    expo.exponential_histogram.aggregation_temporality = 1
    p = expo.exponential_histogram.data_points.add(count=1, sum=bad, scale=0, zero_count=1)
    grad = pb.Metric(name="grad_norm", description="rltel.reduce=scalar")
    grad.histogram.aggregation_temporality = 1
    grad.histogram.data_points.add(count=2, sum=bad)
    result = Decoder().decode(raw(delta, buckets, expo, grad))
    assert (result.accepted, result.rejected) == (4, 0), result.message
    got = {point.metric: point for point in result.snapshots[0].points}
    assert str((got["loss"].count, got["loss"].sum, got["loss"].max)) == str((3, bad, bad))
    assert got["loss"].min == 0.5
    assert str((got["kl"].sum, got["kl"].bucket_counts)) == str((bad, (1, 1)))
    assert str((got["e"].count, got["e"].sum)) == str((1, bad))
    assert str((got["grad_norm"].value, got["grad_norm"].count)) == str((bad, 2))


def test_a_nonfinite_cumulative_sum_gives_nonfinite_windows_with_exact_counts():
    decoder = Decoder(started_ns=0)

    def point(count: int, total: float, buckets: list[int]):
        metric = pb.Metric(name="latency")
        metric.histogram.aggregation_temporality = 2
        p = metric.histogram.data_points.add(start_time_unix_nano=5, count=count, sum=total)
        p.explicit_bounds.extend([1.0])
        p.bucket_counts.extend(buckets)
        result = decoder.decode(raw(metric))
        assert (result.accepted, result.rejected) == (1, 0), result.message
        (window,) = result.snapshots[0].points
        return window.count, window.sum, window.bucket_counts

    assert point(2, 1.0, [2, 0]) == (2, 1.0, (2, 0))
    assert str(point(3, math.nan, [2, 1])) == str((1, math.nan, (0, 1)))
    # the sender's running sum stays NaN: its later windows' sums are unknown, counts exact
    assert str(point(5, math.nan, [3, 2])) == str((2, math.nan, (1, 1)))


def test_series_limit_rejects_new_stateful_series():
    decoder = Decoder(max_series_per_metric=2)
    metric = pb.Metric(name="d")
    metric.sum.is_monotonic, metric.sum.aggregation_temporality = True, 1
    for worker in range(3):
        point = metric.sum.data_points.add(as_double=1.0)
        point.attributes.extend(kv(worker=worker))
    result = decoder.decode(raw(metric))
    assert (result.accepted, result.rejected) == (2, 1)
    assert "series limit 2" in result.message
    assert decoder.series == 2


def test_a_request_is_read_once_its_resources_attributes_and_points_then_decoded():
    message = raw(number_metric("a", "gauge", [1.0, 2.0]), resource={"rltel.experiment": "e"})
    over = message.resource_metrics.add()
    over.resource.attributes.extend(kv(service="x" * 17))  # over max_attribute_value_length
    over.scope_metrics.add().metrics.extend([number_metric("b", "gauge", [3.0] * 3)])
    decoder = Decoder(label_limits=LabelLimits(max_attribute_value_length=16))
    request = decoder.read(message)
    fine, rejected = request.resources
    assert request.points == 5
    assert fine.attributes == (("rltel.experiment", "e"),) and fine.over_limit is None
    assert rejected.attributes == () and rejected.over_limit.limit == "max_attribute_value_length"
    with decoder.stage(request) as staged:
        result = staged.result
    assert (result.accepted, result.rejected) == (2, 3)
    assert result.over_limit == (("max_attribute_value_length", 3),)
    assert [p.value for p in result.snapshots[0].points] == [1.0, 2.0]
