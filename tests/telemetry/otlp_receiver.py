"""A real OTLP/gRPC metrics receiver on 127.0.0.1 for tests: records every request.

A StatsLogger's heartbeat requests (rank 0 beats to its endpoint out of band, in requests
of their own) are kept apart in ``heartbeats``: they are answered OK at once, never counted
in ``calls`` or ``requests`` and never take a failure ``fail_with`` set up for the data.

Built on opentelemetry-proto's ``MetricsServiceServicer``. ``fail_with(code, times)``
answers the next requests with a chosen gRPC status (and, with ``pushback_ms``, asks for
that retry delay as the rltel collector does); ``stop()``/``start()`` on the same port
simulate a collector outage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as service_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from telemetry.heartbeat.wire import SIGNAL
from tests.distributed import free_port


class Receiver(service_grpc.MetricsServiceServicer):
    """Records ``ExportMetricsServiceRequest``s; optionally fails the next calls."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self._lock = threading.Condition()
        self._requests: list[service.ExportMetricsServiceRequest] = []
        self._metadata: list[dict[str, str]] = []
        self._failures: list[tuple[grpc.StatusCode, int | None]] = []
        self.calls = 0
        self.call_times: list[float] = []  # time.monotonic() of every call
        self.stall_s = 0.0  # each call waits this long before answering
        self.heartbeats: list[service.ExportMetricsServiceRequest] = []
        self._server: grpc.Server | None = None

    def Export(self, request, context):
        if is_heartbeat_request(request):
            with self._lock:
                self.heartbeats.append(request)
            return service.ExportMetricsServiceResponse()
        if self.stall_s:
            time.sleep(self.stall_s)
        with self._lock:
            self.calls += 1
            self.call_times.append(time.monotonic())
            if self._failures:
                code, pushback_ms = self._failures.pop(0)
                if pushback_ms is not None:
                    context.set_trailing_metadata((("grpc-retry-pushback-ms", str(pushback_ms)),))
                context.abort(code, f"test receiver answers {code.name}")
            self._requests.append(request)
            self._metadata.append({k: v for k, v in context.invocation_metadata()})
            self._lock.notify_all()
        return service.ExportMetricsServiceResponse()

    def start(self) -> Receiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service_grpc.add_MetricsServiceServicer_to_server(self, server)
        bound = server.add_insecure_port(self.endpoint)
        if bound != self.port:
            raise RuntimeError(f"could not bind {self.endpoint}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def fail_with(
        self, code: grpc.StatusCode, times: int = 1, pushback_ms: int | None = None
    ) -> None:
        with self._lock:
            self._failures.extend([(code, pushback_ms)] * times)

    @property
    def requests(self) -> list[service.ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def metadata(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._metadata)

    def wait_for(
        self,
        predicate: Callable[[list[service.ExportMetricsServiceRequest]], bool],
        timeout: float = 10.0,
    ) -> bool:
        """Block until ``predicate(requests)`` holds or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self._requests):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
            return True

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def is_heartbeat_request(request) -> bool:
    """Whether ``request`` carries a heartbeat (its resources marked as one)."""
    return any(
        kv.key == SIGNAL and any_value(kv.value) == "heartbeat"
        for resource_metrics in request.resource_metrics
        for kv in resource_metrics.resource.attributes
    )


def any_value(value: AnyValue):
    """The Python value of a protobuf ``AnyValue``."""
    return getattr(value, value.WhichOneof("value"))


def resource_of(request) -> dict:
    """Resource attributes of the (single) resource of ``request``."""
    (resource_metrics,) = request.resource_metrics
    return {kv.key: any_value(kv.value) for kv in resource_metrics.resource.attributes}


def metrics_of(request) -> dict:
    """``{name: Metric}`` of every metric in ``request`` (names must not repeat)."""
    out = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                assert metric.name not in out, f"metric {metric.name} repeats in one request"
                out[metric.name] = metric
    return out


def data_points(metric) -> list:
    """The data points of ``metric`` whatever its kind."""
    return list(getattr(metric, metric.WhichOneof("data")).data_points)


def attributes_of(point) -> dict:
    return {kv.key: any_value(kv.value) for kv in point.attributes}


def step_of(request) -> int:
    """The ``train.step`` gauge value of ``request``."""
    (point,) = metrics_of(request)["train.step"].gauge.data_points
    return point.as_int


def point_count(request) -> int:
    """Data points in ``request``, step gauges included."""
    return sum(len(data_points(m)) for m in metrics_of(request).values())
