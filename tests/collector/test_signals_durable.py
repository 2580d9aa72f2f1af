"""The trace and logs services' durable queue (collector/signal_journal.py): a request the
collector answered OK is on disk until its consumers hold it, and a new collector hands what
they did not hold to its consumers, in order, before it serves; a full journal refuses with
a retryable status."""

from __future__ import annotations

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.config import from_dict
from collector.server import CollectorServer
from tests.collector.test_signals import AUTH, METHODS, Recording, call


class Holding(Recording):
    """A consumer whose ``flush`` says whether it holds what it got."""

    def __init__(self, holds: bool) -> None:
        super().__init__()
        self.holds = holds
        self.flushes = 0

    def flush(self) -> bool:
        self.flushes += 1
        return self.holds


def start(tmp_path, *consumers: Recording, limit_bytes: int = 1 << 30) -> CollectorServer:
    """A durable collector handing both signals to ``consumers``, in order."""
    token = tmp_path / "token"
    token.write_text(dict(AUTH)["authorization"].split()[1])
    config = from_dict(
        {
            "receiver": {"port": 0},
            "auth": {"token_file": str(token)},
            "sinks": {"prometheus": {"enabled": False}, "fileroot": str(tmp_path / "runs")},
            "durable": {"directory": str(tmp_path / "state"), "limit_bytes": limit_bytes},
        }
    )
    server = CollectorServer(config, trace_consumers=consumers, log_consumers=consumers)
    server.start()
    return server


def spans(name: str, n: int = 2) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(n):
        span = scope.spans.add()
        span.name, span.trace_id, span.span_id = f"{name}.{i}", bytes(16 * [7]), bytes(8 * [i + 1])
    return request.SerializeToString()


def records(text: str) -> bytes:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.add().body.string_value = text
    return request.SerializeToString()


def bodies(consumer: Recording) -> list[str]:
    return [
        record.body.string_value
        for request in consumer.logs
        for resource in request.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]


def test_what_the_consumers_did_not_hold_reaches_the_next_collector_in_order(tmp_path):
    first = Holding(False)
    server = start(tmp_path, first)
    try:
        for i in range(6):
            assert call(server.endpoint, METHODS["traces"], spans(f"r{i}")) is grpc.StatusCode.OK
            assert call(server.endpoint, METHODS["logs"], records(f"l{i}")) is grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert first.flushes > 0  # asked, and never held: nothing was acknowledged
    assert any((tmp_path / "state" / "signals" / "traces").glob("*.seg"))
    second = Holding(True)
    server = start(tmp_path, second)
    try:
        expected = [f"r{i}.{j}" for i in range(6) for j in range(2)]
        assert [span.name for span in second.spans()] == expected  # before any new request
        assert bodies(second) == [f"l{i}" for i in range(6)]
        assert call(server.endpoint, METHODS["logs"], records("new")) is grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert bodies(second)[-1] == "new"
    assert not (tmp_path / "state" / "signals").exists()  # all held: nothing left
    third = Holding(True)
    server = start(tmp_path, third)
    server.stop(10)
    assert third.spans() == [] and third.logs == []  # nothing handed on twice


def test_a_full_journal_refuses_with_a_retry_delay_and_keeps_nothing(tmp_path, caplog):
    consumer = Holding(False)
    server = start(tmp_path, consumer, limit_bytes=2000)
    try:
        codes = [call(server.endpoint, METHODS["traces"], spans(f"r{i}", 8)) for i in range(40)]
        assert codes[0] is grpc.StatusCode.OK
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes
        accepted = codes.count(grpc.StatusCode.OK)
        assert codes == [grpc.StatusCode.OK] * accepted + [grpc.StatusCode.RESOURCE_EXHAUSTED] * (
            40 - accepted
        )
        assert len(consumer.spans()) == 8 * accepted  # a refused request reached no consumer
        with grpc.insecure_channel(server.endpoint) as channel:
            export = channel.unary_unary(METHODS["traces"])
            try:
                export(spans("late"), metadata=AUTH, timeout=10)
                raise AssertionError("accepted past the journal's limit")
            except grpc.RpcError as err:
                code, trailers = err.code(), dict(err.trailing_metadata())
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "grpc-retry-pushback-ms" in trailers
    finally:
        server.stop(10)
    refusals = [r for r in caplog.records if "refusing requests" in r.getMessage()]
    assert len(refusals) == 1  # once for the run of refusals, not once a request


class Failing(Recording):
    """A consumer that raises while ``failing`` is set, and whose shutdown may raise."""

    def __init__(self, failing: bool, shutdown_raises: bool = False) -> None:
        super().__init__()
        self.failing = failing
        self.shutdown_raises = shutdown_raises

    def consume(self, request) -> None:
        if self.failing:
            raise RuntimeError("consumer bug")
        super().consume(request)

    def shutdown(self, timeout_s: float) -> None:
        if self.shutdown_raises:
            raise RuntimeError("shutdown bug")


def test_a_consumer_that_raises_is_counted_logged_once_a_run_and_the_others_still_get_it(
    tmp_path, caplog
):
    failing, recording = Failing(True), Recording()
    server = start(tmp_path, failing, recording)
    try:
        for i in range(3):
            assert call(server.endpoint, METHODS["traces"], spans(f"r{i}")) is grpc.StatusCode.OK
        assert call(server.endpoint, METHODS["logs"], records("l0")) is grpc.StatusCode.OK
        failing.failing = False
        assert call(server.endpoint, METHODS["traces"], spans("r3")) is grpc.StatusCode.OK
        traces, logs = (service.counts() for service in server.signals)
    finally:
        server.stop(10)
    assert [span.name for span in recording.spans()][::2] == ["r0.0", "r1.0", "r2.0", "r3.0"]
    assert bodies(recording) == ["l0"]
    assert [span.name for span in failing.spans()] == ["r3.0", "r3.1"]
    assert (traces.consumer_errors, logs.consumer_errors) == (3, 1)
    messages = [r.getMessage() for r in caplog.records if r.name == "collector.signal_service"]
    assert [m for m in messages if "failed" in m] == [
        "collector: traces consumer Failing failed: RuntimeError: consumer bug (repeats counted)",
        "collector: logs consumer Failing failed: RuntimeError: consumer bug (repeats counted)",
    ]
    assert "collector: traces consumer Failing works again after 3 failures" in messages


def test_a_consumer_whose_shutdown_raises_leaves_its_requests_to_the_next_collector(tmp_path):
    first = Failing(False, shutdown_raises=True)
    server = start(tmp_path, first)
    try:
        assert call(server.endpoint, METHODS["traces"], spans("r0")) is grpc.StatusCode.OK
        assert call(server.endpoint, METHODS["logs"], records("l0")) is grpc.StatusCode.OK
    finally:
        server.stop(10)  # the consumer held everything (flush True), then its shutdown raised
    second = Recording()
    server = start(tmp_path, second)
    server.stop(10)
    assert [span.name for span in second.spans()] == ["r0.0", "r0.1"]  # handed on again
    assert bodies(second) == ["l0"]
