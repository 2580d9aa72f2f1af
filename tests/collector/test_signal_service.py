"""The trace and logs services' own rules (collector/signal_service.py), through a real
collector on 127.0.0.1: a request with more spans or records than
``limits.heavy_request_points`` is heavy and waits for no other heavy one (refused, retryable,
while one is in); one already heavy by its bytes holds the gate's slot and is not counted
twice; a journal record that does not parse is skipped with a warning; a service closes
once and refuses what comes after."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.config import from_dict
from collector.refusals import Refused
from collector.server import CollectorServer
from collector.signal_journal import request_journal
from tests.collector.test_signals import METHODS, Recording, spans_request

HEAVY_POINTS = 4
WAIT_S = 30.0


class Blocking(Recording):
    """Holds every request whose first span is named ``block`` until :attr:`release` is set;
    counts its shutdowns."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.shutdowns = 0

    def consume(self, request) -> None:
        if isinstance(request, ExportTraceServiceRequest):
            spans = request.resource_spans[0].scope_spans[0].spans
            if spans and spans[0].name == "block":
                self.entered.set()
                assert self.release.wait(WAIT_S)
        super().consume(request)

    def shutdown(self, timeout_s: float) -> None:
        self.shutdowns += 1


def spans(n: int, first: str = "s") -> bytes:
    request = ExportTraceServiceRequest.FromString(spans_request(n))
    request.resource_spans[0].scope_spans[0].spans[0].name = first
    return request.SerializeToString()


def start(tmp_path, consumer: Recording, durable: bool = False, **limits) -> CollectorServer:
    """A collector with ``consumer`` on both signals (``durable``: journaled, which hands
    requests on one at a time, in order)."""
    state = {"directory": str(tmp_path / "state")} if durable else {"enabled": False}
    config = from_dict(
        {
            "receiver": {"port": 0},
            "limits": {"heavy_request_points": HEAVY_POINTS, "max_heavy_requests": 1, **limits},
            "sinks": {"prometheus": {"enabled": False}, "fileroot": str(tmp_path / "runs")},
            "durable": state,
        }
    )
    server = CollectorServer(config, trace_consumers=[consumer], log_consumers=[consumer])
    server.start()
    return server


def export(server: CollectorServer, body: bytes) -> tuple[grpc.StatusCode, dict]:
    """One trace Export: its status code and trailing metadata."""
    with grpc.insecure_channel(server.endpoint) as channel:
        call = channel.unary_unary(METHODS["traces"])
        try:
            call(body, timeout=10)
        except grpc.RpcError as err:
            return err.code(), dict(err.trailing_metadata() or ())
    return grpc.StatusCode.OK, {}


@pytest.fixture
def blocked(tmp_path) -> Iterator[tuple[CollectorServer, Blocking]]:
    """A collector whose consumer holds one heavy trace request (5 spans) in flight."""
    consumer = Blocking()
    server = start(tmp_path, consumer)
    holder = threading.Thread(target=export, args=(server, spans(HEAVY_POINTS + 1, "block")))
    holder.start()
    try:
        assert consumer.entered.wait(WAIT_S)
        yield server, consumer
    finally:
        consumer.release.set()
        holder.join(WAIT_S)
        server.stop(10)


def test_a_second_heavy_request_is_refused_with_a_retry_delay_while_one_is_in(blocked):
    server, consumer = blocked
    code, trailers = export(server, spans(HEAVY_POINTS + 1))
    assert consumer.spans() == []  # the refused one reached no consumer (the held one waits)
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "grpc-retry-pushback-ms" in trailers  # retryable: the sender waits and retries
    traces, _ = (service.counts() for service in server.signals)
    assert traces.refused == HEAVY_POINTS + 1


@pytest.mark.parametrize("n", [1, HEAVY_POINTS])
def test_a_request_of_at_most_heavy_request_points_is_served_meanwhile(blocked, n):
    server, consumer = blocked
    assert export(server, spans(n, "light"))[0] is grpc.StatusCode.OK
    names = [span.name for span in consumer.spans()]
    assert names == ["light", *(f"s{i}" for i in range(1, n))]  # the heavy one still held


def test_a_heavy_request_is_served_again_once_the_one_in_is_done(tmp_path):
    consumer = Blocking()
    server = start(tmp_path, consumer)
    try:
        for n in range(3):  # each gives its slot back
            assert export(server, spans(HEAVY_POINTS + 1, f"h{n}"))[0] is grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert len(consumer.spans()) == 3 * (HEAVY_POINTS + 1)


def test_a_request_heavy_by_its_bytes_and_its_spans_takes_the_gate_slot_once(tmp_path):
    consumer = Recording()
    server = start(tmp_path, consumer, heavy_request_bytes=1)  # every request heavy by bytes
    try:
        assert export(server, spans(HEAVY_POINTS + 1))[0] is grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert len(consumer.spans()) == HEAVY_POINTS + 1


def test_a_journal_record_that_does_not_parse_is_skipped_with_a_warning(tmp_path, caplog):
    journal = request_journal(tmp_path / "state" / "signals" / "traces", 1 << 20, False)
    journal.append(b"\xff\xff\xff not a request")
    journal.append(spans(2, "kept"))
    journal.sync()
    journal.close()
    consumer = Recording()
    caplog.set_level(logging.WARNING, logger="collector.signal_service")
    server = start(tmp_path, consumer, durable=True)
    try:
        assert export(server, spans(1, "new"))[0] is grpc.StatusCode.OK
    finally:
        server.stop(10)
    assert [span.name for span in consumer.spans()] == ["kept", "s1", "new"]
    messages = [r.getMessage() for r in caplog.records if r.name == "collector.signal_service"]
    assert any(m.startswith("durable queue: a traces record unreadable: ") for m in messages)
    assert "durable queue: 2 traces requests of an earlier collector handed on again" in messages


def test_nothing_to_replay_logs_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="collector.signal_service")
    server = start(tmp_path, Recording(), durable=True)
    server.stop(10)
    assert not [r for r in caplog.records if "handed on again" in r.getMessage()]


def test_a_service_closes_once_and_refuses_what_comes_after(tmp_path):
    consumer = Blocking()
    server = start(tmp_path, consumer)
    server.stop(10)
    traces = server.signals[0]
    traces.shutdown(1.0)  # again: nothing more happens
    assert consumer.shutdowns == 2  # once per service: the consumer serves both signals
    with pytest.raises(Refused) as refused:
        traces.ingest(spans(1), lambda: False, False)
    assert refused.value.code is grpc.StatusCode.UNAVAILABLE
