"""Two collectors remote-write into one real Prometheus; a receiver outage loses nothing.

Prometheus runs with ``--web.enable-remote-write-receiver`` on a free loopback port (stopped
by PID); the collectors are in-process :class:`CollectorServer` s fed through their pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

from collector.config import from_dict
from collector.server import CollectorServer
from telemetry.model.snapshot import Counter, Gauge, Snapshot
from telemetry.otlp.encode import encode
from tests.dashboards import servers
from tests.distributed import free_port

pytestmark = pytest.mark.timeout(90)


@contextmanager
def receiver(tmp_path: Path, port: int) -> Iterator[str]:
    """A Prometheus that only receives remote writes; storage kept in ``tmp_path``."""
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}))
    args = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
    ]
    with servers._process(args, tmp_path / "prometheus.log", "/-/ready", port) as url:
        yield url


def collector(url: str, name: str, **remote_write) -> CollectorServer:
    config = from_dict(
        {
            "receiver": {"port": 0},
            "sinks": {
                "prometheus": {"enabled": False},
                "remote_write": {
                    "enabled": True,
                    "url": url + "/api/v1/write",
                    "collector": name,
                    "cluster": "test",
                    "interval_s": 3600.0,
                    **remote_write,
                },
            },
        }
    )
    return CollectorServer(config)


def feed(server: CollectorServer, experiment: str, loss: float, tokens: float) -> None:
    resource = (("service.name", "trainer"), ("rltel.experiment", experiment))
    snapshot = Snapshot((Gauge("loss", loss), Counter("tokens", tokens)), resource=resource)
    for data in encode(snapshot):
        server.pipeline.consume(server.pipeline.decoder.read(encode_metrics(data)))


def query(url: str, expr: str) -> list[dict]:
    return servers.api(url, "query", query=expr)["result"]


def wait_for(check, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, AssertionError):
            pass
        if time.monotonic() > deadline:
            return check()
        time.sleep(0.2)


def test_two_collectors_write_into_one_prometheus_kept_apart_by_external_labels(tmp_path):
    with receiver(tmp_path, free_port()) as url:
        one, two = collector(url, "node-a"), collector(url, "node-b")
        try:
            feed(one, "exp-a", 1.5, 100.0)
            feed(two, "exp-b", 2.5, 200.0)
            assert one.pipeline.force_flush(10) and two.pipeline.force_flush(10)
            losses = wait_for(lambda: len(query(url, "loss")) == 2 and query(url, "loss"))
            tokens = query(url, "tokens_total")
        finally:
            one.pipeline.shutdown(5)
            two.pipeline.shutdown(5)
    by_collector = {r["metric"]["collector"]: r for r in losses}
    assert set(by_collector) == {"node-a", "node-b"}
    assert by_collector["node-a"]["metric"]["experiment"] == "exp-a"
    assert float(by_collector["node-a"]["value"][1]) == 1.5
    assert float(by_collector["node-b"]["value"][1]) == 2.5
    assert {r["metric"]["cluster"] for r in losses} == {"test"}
    totals = {r["metric"]["collector"]: float(r["value"][1]) for r in tokens}
    assert totals == {"node-a": 100.0, "node-b": 200.0}


def test_a_receiver_outage_loses_nothing_within_the_backlog_bound(tmp_path):
    port = free_port()
    with receiver(tmp_path, port) as url:
        server = collector(url, "node-a", interval_s=0.5, max_pending_samples=10_000)
        feed(server, "exp", 1.0, 10.0)
        assert server.pipeline.force_flush(10)
    try:  # Prometheus is stopped: these writes wait in the sink's backlog
        for value in (2.0, 3.0, 4.0):
            feed(server, "exp", value, value * 10)
            time.sleep(0.05)
        sink = server.pipeline.shared.queued[0].sink
        wait_for(lambda: sink.pending_samples > 0, 5)
        assert sink.pending_samples > 0
        with receiver(tmp_path, port) as url:  # same port and storage
            # delivered by the refresher (no new snapshot needed)
            wait_for(lambda: sink.pending_samples == 0, 15)
            feed(server, "exp", 5.0, 50.0)
            assert server.pipeline.force_flush(10)
            samples = wait_for(lambda: query(url, 'loss{collector="node-a"}[10m]'))
            tokens = query(url, 'tokens_total{collector="node-a"}')
    finally:
        server.pipeline.shutdown(5)
    values = [float(v) for _, v in samples[0]["values"]]
    assert {1.0, 2.0, 3.0, 4.0, 5.0} <= set(values)
    assert values == sorted(values)  # written in order
    assert float(tokens[0]["value"][1]) == 50.0
    assert sink.dropped_samples == 0 and sink.rejected_samples == 0
    assert server.pipeline.shared.stats()["remote_write"].dropped == 0
