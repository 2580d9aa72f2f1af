"""A TLS mismatch between a sender and the collector is named in the sender's log, not only
``UNAVAILABLE`` (issue 23, item 7): a plaintext channel to a TLS receiver, a TLS channel to a
plaintext one, a certificate the sender does not trust; logged once, not per attempt."""

from __future__ import annotations

import logging
import time

import pytest

from collector.config import from_dict
from collector.server import CollectorServer
from exporters.otlp.grpc_exporter import tls_mismatch
from rltel.logger import StatsLogger
from tests.tls_files import needs_openssl, self_signed

ATTEMPTS_S = 60.0


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pem")
    cert, key = self_signed(folder)
    other, _ = self_signed(folder, "other")
    return str(cert), str(key), str(other)


def mismatch_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "exporters.otlp.grpc_exporter"]


def send_until_logged(tmp_path, caplog, server: CollectorServer, otlp: dict) -> list[str]:
    """Commit steps to ``server`` until a mismatch is logged; the lines logged by then."""
    caplog.set_level(logging.WARNING, logger="exporters.otlp.grpc_exporter")
    logger = StatsLogger(
        {
            "experiment_name": "tls",
            "trial_name": "t",
            "fileroot": str(tmp_path),
            "console": {"enabled": False},
            "otlp": {"endpoint": f"localhost:{server.port}", "timeout": 5.0, **otlp},
        }
    )
    try:
        deadline, step = time.monotonic() + ATTEMPTS_S, 0
        while not mismatch_lines(caplog) and time.monotonic() < deadline:
            logger.commit(0, step, step, {"loss": 1.0})
            step += 1
            time.sleep(0.1)
        retries = logger.health()["otlp"]["retries"]
        while logger.health()["otlp"]["retries"] < retries + 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # further failed attempts, which log no second line
        assert logger.health()["otlp"]["retries"] >= retries + 2
    finally:
        logger.close(1.0)
    return mismatch_lines(caplog)


def collector(tls: dict | None) -> CollectorServer:
    receiver = {"port": 0, **({"tls": tls} if tls else {})}
    server = CollectorServer(
        from_dict({"receiver": receiver, "sinks": {"prometheus": {"enabled": False}}})
    )
    server.start()
    return server


@needs_openssl
def test_a_plaintext_sender_to_a_tls_collector_is_told_so(tmp_path, caplog, pem):
    cert, key, _ = pem
    server = collector({"cert_file": cert, "key_file": key})
    try:
        lines = send_until_logged(tmp_path, caplog, server, {"insecure": True})
    finally:
        server.stop(5)
    assert lines == [
        f"otlp: localhost:{server.port}: the endpoint closed the connection at once: a "
        "plaintext channel to a TLS port? (set otlp.insecure: false and otlp.tls.ca_file)"
    ]


@needs_openssl
def test_a_tls_sender_to_a_plaintext_collector_is_told_so(tmp_path, caplog, pem):
    cert, _, _ = pem
    server = collector(None)
    try:
        otlp = {"insecure": False, "tls": {"ca_file": cert}}
        lines = send_until_logged(tmp_path, caplog, server, otlp)
    finally:
        server.stop(5)
    (line,) = lines
    assert line.startswith(f"otlp: localhost:{server.port}: the TLS handshake failed: the ")
    assert "speaks plaintext" in line and "otlp.insecure: true" in line


@needs_openssl
def test_an_untrusted_certificate_names_the_ca_file(tmp_path, caplog, pem):
    cert, key, other = pem
    server = collector({"cert_file": cert, "key_file": key})
    try:
        otlp = {"insecure": False, "tls": {"ca_file": other}}
        lines = send_until_logged(tmp_path, caplog, server, otlp)
    finally:
        server.stop(5)
    (line,) = lines
    assert line.startswith(f"otlp: localhost:{server.port}: the TLS handshake failed")
    assert line.endswith("(check otlp.tls.ca_file against the endpoint's certificate)")


@pytest.mark.parametrize(
    ("details", "tls", "answer", "named"),
    [
        ("last error: UNAVAILABLE: x: Socket closed", False, True, True),
        ("last error: UNAVAILABLE: x: Socket closed", False, False, False),
        ("last error: UNAVAILABLE: x: Socket closed", True, True, False),
        ("last error: UNAVAILABLE: x: Connection refused", False, True, False),
        ("last error: UNAVAILABLE: x: Connection refused", True, True, False),
        (
            "x: Ssl handshake failed (TSI_PROTOCOL_FAILURE): WRONG_VERSION_NUMBER",
            False,
            True,
            False,
        ),
    ],
)
def test_only_the_failures_that_point_at_tls_are_named(details, tls, answer, named):
    asked = []

    def speaks_tls() -> bool:
        asked.append(True)
        return answer

    assert (tls_mismatch(details, tls, speaks_tls) is not None) is named
    assert asked == ([True] if not tls and "Socket closed" in details else [])
