"""The "plaintext channel to a TLS port?" hint needs the endpoint's own TLS answer (issue 38,
item 5): a plaintext port whose connections close (what a dying plaintext server does, and
what gave ``Socket closed`` after a collector's SIGKILL) and a SIGKILLed ``rltel collector``
get no hint; a TLS collector answers the probe with a TLS record. The closing port gives
``Socket closed`` every time (the hint was logged there before the probe); a SIGKILLed
collector gave it in some runs only (here its sender saw ``Connection refused``), so its test
guards the outcome without reproducing that race."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.config import from_dict
from collector.server import CollectorServer
from exporters.otlp.tls_probe import speaks_tls
from rltel.logger import StatsLogger
from tests.tls_files import needs_openssl, self_signed

RLTEL = Path(sys.executable).with_name("rltel")
WAIT_S = 60.0
HINT = "a plaintext channel to a TLS port?"


class ClosingPort:
    """A plaintext TCP port that accepts each connection and closes it at once."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self._sock.close()
        self._thread.join(10)


def otlp_logger(tmp_path: Path, port: int) -> StatsLogger:
    return StatsLogger(
        {
            "experiment_name": "hint",
            "trial_name": "t",
            "fileroot": str(tmp_path),
            "console": {"enabled": False},
            "otlp": {"endpoint": f"127.0.0.1:{port}", "timeout": 5.0, "insecure": True},
        }
    )


def hint_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if HINT in r.getMessage()]


def commit_until(logger: StatsLogger, done, first_step: int = 0) -> int:
    """Commit a step every 0.1 s until ``done()``; the next step's number."""
    deadline, step = time.monotonic() + WAIT_S, first_step
    while not done() and time.monotonic() < deadline:
        logger.commit(0, step, step, {"loss": 1.0})
        step += 1
        time.sleep(0.1)
    assert done()
    return step


def test_a_plaintext_port_that_closes_each_connection_gets_no_tls_hint(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    port = ClosingPort()
    logger = otlp_logger(tmp_path, port.port)
    try:
        commit_until(logger, lambda: port.accepted >= 6 and logger.health()["otlp"]["retries"] >= 3)
    finally:
        logger.close(1.0)
        port.close()
    assert hint_lines(caplog) == []


@pytest.fixture
def collector_process() -> Iterator[tuple[subprocess.Popen, int]]:
    """A plaintext ``rltel collector`` subprocess and its OTLP port."""
    proc = subprocess.Popen(
        [str(RLTEL), "collector", "--otlp-port", "0", "--prometheus-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("rltel collector: otlp="), line
        yield proc, int(line.split()[2].rsplit(":", 1)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def test_a_sigkilled_plaintext_collector_gets_no_tls_hint(tmp_path, caplog, collector_process):
    caplog.set_level(logging.WARNING)
    proc, port = collector_process
    logger = otlp_logger(tmp_path, port)
    try:
        step = commit_until(logger, lambda: logger.health()["otlp"]["requests_exported"] >= 3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        retries = logger.health()["otlp"]["retries"]
        commit_until(logger, lambda: logger.health()["otlp"]["retries"] >= retries + 3, step)
        assert not speaks_tls(f"127.0.0.1:{port}")  # nothing listens: refused, no evidence
    finally:
        logger.close(1.0)
    assert hint_lines(caplog) == []


@needs_openssl
def test_the_probe_finds_tls_only_where_the_endpoint_speaks_it(tmp_path):
    cert, key = self_signed(tmp_path)
    tls = {"cert_file": str(cert), "key_file": str(key)}
    servers = {
        secure: CollectorServer(
            from_dict(
                {
                    "receiver": {"port": 0, **({"tls": tls} if secure else {})},
                    "sinks": {"prometheus": {"enabled": False}},
                }
            )
        )
        for secure in (True, False)
    }
    closing = ClosingPort()
    try:
        for server in servers.values():
            server.start()
        assert speaks_tls(f"127.0.0.1:{servers[True].port}")
        assert speaks_tls(f"localhost:{servers[True].port}")
        assert not speaks_tls(f"127.0.0.1:{servers[False].port}")
        assert not speaks_tls(f"127.0.0.1:{closing.port}")
        assert not speaks_tls("127.0.0.1")  # no port
    finally:
        for server in servers.values():
            server.stop(5)
        closing.close()
