"""Name and label limits, per-request bounds and counter overflow, over real gRPC calls."""

from __future__ import annotations

import time

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from collector.config import LimitsConfig, from_dict
from collector.pipeline import Pipeline
from collector.server import SERVICE, CollectorServer

from .conftest import samples, scrape

METHOD = f"/{SERVICE}/Export"
LIMITS = {
    "max_attributes_per_point": 4,
    "max_attribute_key_length": 8,
    "max_attribute_value_length": 16,
    "max_metric_name_length": 20,
}


@pytest.fixture
def server():
    sections = {"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0}}}
    running = CollectorServer(from_dict({**sections, "limits": LIMITS}))
    running.start()
    yield running
    running.stop(10)


def export(endpoint: str, request: ExportMetricsServiceRequest, timeout: float = 10.0):
    with grpc.insecure_channel(endpoint, options=[("grpc.max_send_message_length", -1)]) as ch:
        call = ch.unary_unary(
            METHOD,
            request_serializer=None,
            response_deserializer=ExportMetricsServiceResponse.FromString,
        )
        return call(request.SerializeToString(), timeout=timeout)


def gauge_request(name: str = "g", attrs: dict | None = None, value=None) -> tuple:
    """A request with one gauge point; ``value`` sets one attribute's AnyValue by hand."""
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name=name)
    point = metric.gauge.data_points.add(as_double=1.0)
    for key, text in (attrs or {}).items():
        point.attributes.add(key=key).value.string_value = text
    return request, point


def rejected(endpoint: str, request) -> tuple[int, str]:
    response = export(endpoint, request)
    return response.partial_success.rejected_data_points, response.partial_success.error_message


def over_limit(server) -> dict[str, int]:
    return server.pipeline.stats().over_limit


@pytest.mark.parametrize(
    ("limit", "at", "above"),
    [
        ("max_metric_name_length", {"name": "n" * 20}, {"name": "n" * 21}),
        ("max_attributes_per_point", {"attrs": {f"k{i}": "v" for i in range(4)}},
         {"attrs": {f"k{i}": "v" for i in range(5)}}),
        ("max_attribute_key_length", {"attrs": {"k" * 8: "v"}}, {"attrs": {"k" * 9: "v"}}),
        ("max_attribute_value_length", {"attrs": {"k": "v" * 16}}, {"attrs": {"k": "v" * 17}}),
    ],
)  # fmt: skip
def test_each_limit_at_and_one_above(server, limit, at, above):
    assert rejected(server.endpoint, gauge_request(**at)[0]) == (0, "")
    below = {
        k: (v[:-1] if isinstance(v, str) else dict(list(v.items())[:-1])) for k, v in at.items()
    }
    assert rejected(server.endpoint, gauge_request(**below)[0]) == (0, "")
    count, message = rejected(server.endpoint, gauge_request(**above)[0])
    assert count == 1 and limit in message
    assert over_limit(server) == {limit: 1}


def test_arrays_and_nested_maps_count_their_text_length(server):
    request, point = gauge_request()
    array = point.attributes.add(key="a").value.array_value
    for i in range(8):  # "[0,1,2,3,4,5,6,7]" is 17 characters
        array.values.add(int_value=i)
    count, message = rejected(server.endpoint, request)
    assert count == 1 and "max_attribute_value_length" in message
    request, point = gauge_request()
    array = point.attributes.add(key="a").value.array_value
    for i in range(7):  # "[0,1,2,3,4,5,6]" is 15
        array.values.add(int_value=i)
    assert rejected(server.endpoint, request) == (0, "")
    request, point = gauge_request()
    nested = point.attributes.add(key="m").value.kvlist_value
    nested.values.add(key="x").value.string_value = "y" * 14  # "{x=yyyy...}" is 18
    count, message = rejected(server.endpoint, request)
    assert count == 1 and "max_attribute_value_length" in message
    request, _ = gauge_request()
    request.resource_metrics[0].resource.attributes.add(key="r").value.string_value = "x" * 17
    count, message = rejected(server.endpoint, request)  # a resource over a limit: all its points
    assert count == 1 and "resource" in message
    assert over_limit(server) == {"max_attribute_value_length": 3}


def test_the_issue_abuses_are_rejected_and_never_reach_metrics(server):
    abuses = []
    request, point = gauge_request("abuse_big_value")
    point.attributes.add(key="v").value.string_value = "x" * (3 * 1024 * 1024)
    abuses.append((request, "max_attribute_value_length"))
    request, point = gauge_request("abuse_array")
    array = point.attributes.add(key="a").value.array_value
    for i in range(300_000):
        array.values.add(int_value=i)
    abuses.append((request, "max_attribute_value_length"))
    request, point = gauge_request("abuse_attrs")
    for i in range(50_000):
        point.attributes.add(key=f"k{i}").value.string_value = "v"
    abuses.append((request, "max_attributes_per_point"))
    abuses.append((gauge_request("n" * 200_000)[0], "max_metric_name_length"))
    for request, limit in abuses:
        count, message = rejected(server.endpoint, request)
        assert count == 1 and limit in message, limit
        assert len(message) < 2000  # the message never echoes the abuse
    export(server.endpoint, gauge_request("fine")[0])
    assert server.pipeline.force_flush()
    body = scrape(server.metrics_url)
    assert samples(body, "fine") and not [n for n, _ in body if n.startswith("abuse")]
    assert not [n for n, _ in body if len(n) > 1000]
    (count,) = samples(
        body, "rltel_collector_points_over_limit_total", limit="max_attributes_per_point"
    ).values()
    assert count == 1


def test_points_per_request_bound_at_and_above():
    sections = {"receiver": {"port": 0}, "sinks": {"prometheus": {"enabled": False}}}
    server = CollectorServer(from_dict({**sections, "limits": {"max_points_per_request": 100}}))
    server.start()
    try:

        def points(n: int) -> ExportMetricsServiceRequest:
            request = ExportMetricsServiceRequest()
            metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name="p")
            for _ in range(n):
                metric.gauge.data_points.add(as_double=1.0)
            return request

        assert export(server.endpoint, points(100)) is not None
        with pytest.raises(grpc.RpcError) as err:
            export(server.endpoint, points(101))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_points_per_request" in err.value.details()
        stats = server.pipeline.stats()
    finally:
        server.stop(10)
    assert stats.points_accepted == 100 and stats.refused["too_large"] == 1


def sum_request(temporality: int, series: dict[str, float]) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    request.resource_metrics.add().resource.attributes.add(
        key="service.name"
    ).value.string_value = "s"
    metric = request.resource_metrics[0].scope_metrics.add().metrics.add(name="tokens")
    metric.sum.is_monotonic, metric.sum.aggregation_temporality = True, temporality
    for user, value in series.items():
        point = metric.sum.data_points.add(as_double=value, start_time_unix_nano=1)
        point.time_unix_nano = time.time_ns()
        point.attributes.add(key="user").value.string_value = user
    return request


@pytest.mark.parametrize("temporality", [1, 2], ids=["delta", "cumulative"])
def test_counter_overflow_through_the_collector_is_exact(temporality):
    config = from_dict(
        {"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0, "series_limit": 3}}}
    )
    server = CollectorServer(config)
    server.start()
    totals: dict[str, float] = {}
    seen = []
    try:
        for step in range(6):
            users = [f"u{(step * 7 + i) % 40}" for i in range(12)]  # different subsets
            sent = {}
            for i, user in enumerate(users):
                increase = float(step + i + 1)
                totals[user] = totals.get(user, 0.0) + increase
                sent[user] = increase if temporality == 1 else totals[user]
            export(server.endpoint, sum_request(temporality, sent))
            assert server.pipeline.force_flush()
            body = samples(scrape(server.metrics_url), "tokens_total")
            regular = sum(
                v for labels, v in body.items() if ("otel_metric_overflow", "true") not in labels
            )
            (overflow,) = [
                v for labels, v in body.items() if ("otel_metric_overflow", "true") in labels
            ]
            assert regular + overflow == sum(totals.values()), step
            seen.append(overflow)
    finally:
        server.stop(10)
    assert seen == sorted(seen) and seen[0] > 0  # never decreases


def test_a_resource_over_a_limit_opens_no_run():
    opened = []
    limits = LimitsConfig(max_attribute_value_length=16)
    pipeline = Pipeline([], lambda *run: opened.append(run) or [], limits)
    request, _ = gauge_request()
    request.resource_metrics.extend(gauge_request()[0].resource_metrics)
    resources = ({"rltel.experiment": "ok"}, {"rltel.experiment": "over", "r": "x" * 17})
    for resource_metrics, attrs in zip(request.resource_metrics, resources):
        for key, text in attrs.items():
            resource_metrics.resource.attributes.add(key=key).value.string_value = text
    result = pipeline.consume(pipeline.decoder.read(request))
    pipeline.shutdown(5)
    assert (result.accepted, result.rejected) == (1, 1)
    assert opened == [("ok", "default")]
