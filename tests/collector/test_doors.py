"""The collector's open doors closed (issue 23, items 6 and 7): its port is not shared, failed
auth attempts are logged (peer and reason, never the token) with a rate limit, and its
/metrics carries the standard ``process_*`` families (a restart shows as a new start time)."""

from __future__ import annotations

import errno
import socket

import psutil
import pytest

from tests.collector.conftest import samples, scrape


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
