"""One rule for a gRPC channel to an OTLP endpoint (the heartbeat sender and the trace
forwarder use it), tried against a real plaintext TraceService on 127.0.0.1."""

from __future__ import annotations

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.traces.forward import EXPORT_METHOD
from exporters.otlp.grpc_exporter import grpc_channel
from tests.collector.test_traces_forward import Receiver


def _export(channel: grpc.Channel) -> None:
    call = channel.unary_unary(
        EXPORT_METHOD,
        request_serializer=ExportTraceServiceRequest.SerializeToString,
        response_deserializer=ExportTraceServiceResponse.FromString,
    )
    try:
        call(ExportTraceServiceRequest(), timeout=10)
    finally:
        channel.close()


@pytest.fixture
def receiver():
    made = Receiver()
    yield made
    made.server.stop(None)


@pytest.mark.parametrize("prefix", ["", "http://"])
def test_plaintext_when_insecure(receiver, prefix):
    _export(grpc_channel(f"{prefix}127.0.0.1:{receiver.port}", insecure=True, tls=None))
    assert receiver.calls == 1


@pytest.mark.parametrize(
    ("endpoint", "insecure"), [("127.0.0.1:{port}", False), ("https://127.0.0.1:{port}", True)]
)
def test_tls_when_not_insecure_or_https(receiver, endpoint, insecure):
    """A TLS channel cannot speak to the plaintext receiver: the call never arrives."""
    channel = grpc_channel(endpoint.format(port=receiver.port), insecure=insecure, tls=None)
    with pytest.raises(grpc.RpcError) as caught:
        _export(channel)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE and receiver.calls == 0
