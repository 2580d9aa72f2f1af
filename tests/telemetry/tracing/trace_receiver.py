"""A real OTLP/gRPC ``TraceService`` on 127.0.0.1 that keeps the requests it receives: what
the collector's trace service stands for in the StatsLogger's collector-mode test."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as service
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as service_grpc

from tests.collector.trace_checks import spans_of


class TraceReceiver(service_grpc.TraceServiceServicer):
    """Answers every ``Export`` OK and keeps its request."""

    def __init__(self) -> None:
        self._requests: list[service.ExportTraceServiceRequest] = []
        self._changed = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def Export(self, request: Any, context: Any) -> service.ExportTraceServiceResponse:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()
        return service.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        with self._changed:
            requests = list(self._requests)
        out = []
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = {
                    kv.key: getattr(kv.value, kv.value.WhichOneof("value"))
                    for kv in resource_spans.resource.attributes
                }
                for scope in resource_spans.scope_spans:
                    out.extend((resource, span) for span in scope.spans)
        return out

    def wait_for(self, count: int, timeout_s: float = 60.0) -> None:
        """Until ``count`` spans arrived (or fail after ``timeout_s``)."""
        with self._changed:
            ok = self._changed.wait_for(lambda: len(self._spans_unlocked()) >= count, timeout_s)
        assert ok, f"{len(self.spans())} spans arrived, expected {count}"

    def _spans_unlocked(self) -> list[Any]:
        return spans_of(self._requests)

    def __enter__(self) -> TraceReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
