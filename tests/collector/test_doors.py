"""The collector's open doors closed (issue 23, items 6 and 7): its port is not shared, failed
auth attempts are logged (peer and reason, never the token) with a rate limit, and its
/metrics carries the standard ``process_*`` families (a restart shows as a new start time)."""

from __future__ import annotations

import errno
import logging
import socket

import grpc
import psutil
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from collector.auth import allows_call, authorization, peer_host, receiver_check
from exporters.bearer import MAX_PEERS
from tests.collector.conftest import samples, scrape
from tests.collector.test_cli import collector, error_line
from tests.collector.test_server import gauges_request, status_of

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


def test_the_receiver_port_takes_no_second_socket_even_with_so_reuseport(start_collector):
    """gRPC sets SO_REUSEPORT by default; the receiver turns it off, so another process's
    socket (which would set it) cannot bind the port and take half the senders."""
    server = start_collector()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with pytest.raises(OSError) as caught:
            sock.bind(("127.0.0.1", server.port))
        assert caught.value.errno == errno.EADDRINUSE


def test_metrics_carry_the_process_start_time_and_the_standard_process_families(
    start_collector,
):
    server = start_collector()
    scraped = scrape(server.metrics_url)
    (start,) = samples(scraped, "process_start_time_seconds").values()
    assert start == pytest.approx(psutil.Process().create_time(), abs=1.0)
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        (value,) = samples(scraped, name).values()
        assert value > 0, name


def refused_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "collector.auth"]


def test_refused_calls_are_logged_with_peer_and_reason_never_the_token(
    start_collector, tmp_path, caplog
):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    server = start_collector(auth={"token_file": str(token)})
    body = gauges_request(2)
    caplog.set_level(logging.WARNING, logger="collector.auth")
    wrong = (("authorization", "Bearer guessed-token-1"),)
    for _ in range(5):
        assert status_of(server.endpoint, body, metadata=wrong) == UNAUTHENTICATED
    assert status_of(server.endpoint, body) == UNAUTHENTICATED
    good = (("authorization", "Bearer s3cret-token"),)
    assert status_of(server.endpoint, body, metadata=good) == grpc.StatusCode.OK
    assert server.request_counts()["UNAUTHENTICATED"] == 6  # every refusal counted ...
    (line,) = refused_lines(caplog)  # ... and logged once (the next after LOG_INTERVAL_S)
    assert line == (
        "collector: refused an unauthenticated call from ipv4:127.0.0.1: wrong bearer token"
    )
    assert "guessed" not in caplog.text and "s3cret" not in caplog.text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ((), "no authorization header"),
        ((("authorization", "Basic s3cret"),), "not a bearer token"),
        ((("authorization", "s3cret"),), "not a bearer token"),
        ((("authorization", "Bearer s3cre"),), "wrong bearer token"),
        ((("authorization", b"Bearer s3cret-"),), "wrong bearer token"),
        ((("x-other", "Bearer s3cret"),), "no authorization header"),
        ((("authorization", "Bearer s3cret"),), None),
        ((("authorization", "bearer  s3cret "),), None),
        ((("authorization", "BEARER s3cret"),), None),
        ((("authorization", "Bearer \ts3cret"),), "wrong bearer token"),
        ((("authorization", "Bearer"),), "not a bearer token"),
        ((("authorization", "Token s3cret"),), "not a bearer token"),  # the right token
        ((("accept", "Bearer s3cret"),), "no authorization header"),  # another key's value
    ],
)
def test_the_reason_of_each_refusal(metadata, reason):
    assert receiver_check("s3cret").reason(authorization(metadata)) == reason


def test_one_line_per_peer_per_interval_with_the_count_since_its_last(caplog):
    clock = Clock()
    check = receiver_check("s3cret", log_interval_s=10.0, clock=clock)
    caplog.set_level(logging.WARNING, logger="collector.auth")
    a, b = "ipv4:10.0.0.1:40000", "ipv6:[::1]:5000"
    for port in range(40000, 40004):  # new connections of one peer: one line
        assert not allows_call(check, (), f"ipv4:10.0.0.1:{port}")
    assert not allows_call(check, (), b)
    assert allows_call(check, (("authorization", "Bearer s3cret"),), a)
    clock.now += 9.999
    assert not allows_call(check, (), a)
    assert len(refused_lines(caplog)) == 2
    clock.now += 0.001
    assert not allows_call(check, (), a)
    clock.now += 10.0
    assert not allows_call(check, (), a)
    assert refused_lines(caplog) == [
        "collector: refused an unauthenticated call from ipv4:10.0.0.1: no authorization header",
        "collector: refused an unauthenticated call from ipv6:[::1]: no authorization header",
        "collector: refused an unauthenticated call from ipv4:10.0.0.1: no authorization header"
        " (5 refused from it since its last line)",
        "collector: refused an unauthenticated call from ipv4:10.0.0.1: no authorization header",
    ]


def test_the_peers_remembered_are_bounded(caplog):
    check = receiver_check("s3cret", clock=Clock())
    caplog.set_level(logging.WARNING, logger="collector.auth")

    def refuse(n: int, port: int) -> int:
        allows_call(check, (), f"ipv4:10.1.{n // 256}.{n % 256}:{port}")
        return len(refused_lines(caplog))

    for n in range(MAX_PEERS + 1):  # one more than remembered: a line each
        refuse(n, 1)
    assert refuse(1, 2) == MAX_PEERS + 1  # the second oldest is remembered: no line
    assert refuse(MAX_PEERS, 2) == MAX_PEERS + 1  # and the newest
    assert refuse(0, 2) == MAX_PEERS + 2  # the oldest was forgotten: a line again


def test_a_peer_is_logged_again_once_a_minute_by_default(caplog):
    clock = Clock()
    check = receiver_check("s3cret", clock=clock)
    caplog.set_level(logging.WARNING, logger="collector.auth")
    for clock.now in (10.0, 35.0, 69.999, 70.0, 129.0, 140.0):
        assert not allows_call(check, (), "ipv4:10.0.0.1:1")
    line = "collector: refused an unauthenticated call from ipv4:10.0.0.1: no authorization header"
    assert refused_lines(caplog) == [
        line,  # at 10 s
        line + " (3 refused from it since its last line)",  # at 70 s
        line + " (2 refused from it since its last line)",  # at 140 s
    ]


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5555", "ipv4:127.0.0.1"),
        ("ipv6:[::1]:5555", "ipv6:[::1]"),
        ("ipv6:%5B::1%5D:80", "ipv6:%5B::1%5D"),
        ("unix:/tmp/s.sock", "unix:/tmp/s.sock"),
        ("ipv4:127.0.0.1", "ipv4:127.0.0.1"),
        ("ipv6:[::1]", "ipv6:[::1]"),  # no port: the colons inside stay
    ],
)
def test_a_peer_is_its_address_without_the_port(peer, host):
    assert peer_host(peer) == host


def test_a_bad_tls_file_is_one_line_naming_its_key_without_a_port_hint(tmp_path):
    garbage = tmp_path / "cert.pem"
    garbage.write_text("garbage\n")
    config = tmp_path / "collector.yaml"
    tls = {"cert_file": str(garbage), "key_file": str(garbage)}
    config.write_text(yaml.safe_dump({"collector": {"receiver": {"port": 0, "tls": tls}}}))
    result = collector("--config", str(config))
    line = error_line(result)  # the reason in brackets is OpenSSL's
    assert line.startswith(
        "rltel collector: error: collector.receiver.tls.cert_file is not a PEM certificate "
        f"file: {str(garbage)!r} ("
    )
    assert "overrides it" not in line  # not a port: no --otlp-port hint


def test_the_health_service_answers_without_the_token_and_export_does_not(
    start_collector, tmp_path
):
    """The documented choice (docs/config.md, collector.auth): probes send no token."""
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    server = start_collector(auth={"token_file": str(token)})
    with grpc.insecure_channel(server.endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "opentelemetry.proto.collector.metrics.v1.MetricsService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert status_of(server.endpoint, gauges_request(1)) == UNAUTHENTICATED
