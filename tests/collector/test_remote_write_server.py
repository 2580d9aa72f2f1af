"""The collector's remote-write sink on its own ``/metrics`` and ``/healthz``."""

from __future__ import annotations

import threading
import time
import urllib.request

from .conftest import samples, scrape

PREFIX = "rltel_collector_remote_write_"


def healthz(server) -> str:
    url = server.metrics_url.replace("/metrics", "/healthz")
    return urllib.request.urlopen(url, timeout=10).read().decode()


def test_an_unreachable_receiver_shows_on_metrics_and_healthz(start_collector, tmp_path):
    server = start_collector(
        sinks={
            "fileroot": str(tmp_path),  # its durable state: the backlog is kept there at stop
            "remote_write": {
                "enabled": True,
                "url": "http://127.0.0.1:9/api/v1/write",  # nothing listens on port 9
                "collector": "node-a",
                "interval_s": 0.2,  # the collector's own metrics are written this often
            },
        }
    )
    assert healthz(server) == "ok\n"
    deadline = time.monotonic() + 30
    while not healthz(server).startswith("degraded:") and time.monotonic() < deadline:
        threading.Event().wait(0.1)
    assert healthz(server).startswith(
        "degraded:\nremote_write http://127.0.0.1:9/api/v1/write: down"
    )
    scraped = scrape(server.metrics_url)
    assert samples(scraped, f"{PREFIX}degraded") == {(): 1.0}
    assert sum(samples(scraped, f"{PREFIX}samples_pending").values()) > 0
    assert sum(samples(scraped, f"{PREFIX}retries_total").values()) > 0
    assert samples(scraped, f"{PREFIX}samples_sent_total") == {(): 0.0}
    dropped = samples(scraped, f"{PREFIX}samples_dropped_total")
    assert set(dropped) == {
        (("reason", r),) for r in ("backlog_full", "too_old", "refused", "shutdown")
    }
    server.stop(1.0)  # the receiver is down: what is left is kept for the next start
    assert list(tmp_path.glob(".collector-state/*/shared/remote_write/backlog.kept"))
