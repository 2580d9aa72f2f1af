"""The remote-write sink against a local HTTP receiver: wire format, retry policy, contract."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collector.config import RemoteWriteConfig, SinksConfig, from_dict
from exporters import registry
from exporters.base import ExportResult
from exporters.registry import BuildContext
from exporters.remote_write import RemoteWriteSink, client, proto
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Counter, Gauge, Histogram, Snapshot

RESOURCE = (("service.name", "trainer"), ("rltel.experiment", "exp"), ("rltel.trial", "t0"))
SNAPSHOT = Snapshot(
    (
        Gauge("loss", 0.5),
        Counter("tokens", 42.0, unit="{token}"),
        Histogram("kl", 2, 3.0, 1.0, 2.0, (1.5,), (1, 1)),
    ),
    resource=RESOURCE,
)


class Receiver:
    """Answers each POST with the next status of ``statuses`` (the last one repeats)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[tuple[dict[str, str], list]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                decoded = proto.decode(client.decompress(body))
                receiver.requests.append((dict(self.headers), decoded))
                index = min(len(receiver.requests), len(receiver.statuses)) - 1
                self.send_response(receiver.statuses[index])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/write"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def contract_config(tmp_path, stack):
    """The remote-write sink of the sink contract (tests/exporters/test_base.py), writing to
    a receiver that takes everything."""
    receiver = Receiver([200])
    stack.callback(receiver.close)
    section = RemoteWriteConfig(enabled=True, url=receiver.url)
    return SinksConfig(remote_write=section), BuildContext(root="collector.sinks")


@pytest.fixture
def receiver(request) -> Iterator[Receiver]:
    server = Receiver(getattr(request, "param", [204]))
    yield server
    server.close()


def _sink(url: str, **kw) -> RemoteWriteSink:
    config = RemoteWriteConfig(enabled=True, url=url, collector="c1", cluster="k", **kw)
    return RemoteWriteSink(config)


def test_wire_format_names_and_external_labels(receiver):
    sink = _sink(receiver.url, external_labels={"region": "eu"})
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
    finally:
        sink.shutdown()
    headers, series = receiver.requests[0]
    assert headers["Content-Encoding"] == "snappy"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    by_name = {}
    for labels, samples in series:
        assert list(labels) == sorted(labels)  # the spec wants labels sorted by name
        assert labels["collector"] == "c1" and labels["cluster"] == "k"
        assert labels["region"] == "eu"
        assert labels["__name__"] == "target_info" or labels["experiment"] == "exp"
        by_name.setdefault(labels["__name__"], []).append((labels, samples))
    assert by_name["loss"][0][1][0][0] == 0.5
    assert by_name["tokens_total"][0][1][0][0] == 42.0
    assert by_name["kl_count"][0][1][0][0] == 2 and by_name["kl_sum"][0][1][0][0] == 3.0
    assert {lab["le"]: s[0][0] for lab, s in by_name["kl_bucket"]} == {"1.5": 1, "+Inf": 2}
    assert by_name["kl_avg"][0][1][0][0] == 1.5
    assert by_name["kl_min"][0][1][0][0] == 1.0 and by_name["kl_max"][0][1][0][0] == 2.0
    assert "target_info" in by_name


def test_only_touched_series_are_written_with_increasing_timestamps(receiver):
    sink = _sink(receiver.url)
    other = Snapshot((Gauge("loss", 0.7),), resource=(("service.name", "other"),))
    try:
        sink.export(SNAPSHOT)
        sink.export(other)
    finally:
        sink.shutdown()
    second = receiver.requests[1][1]
    assert {labels["job"] for labels, _ in second} == {"other"}
    assert receiver.requests[0][1][0][1][0][1] < second[0][1][0][1]


@pytest.mark.parametrize("receiver", [[400]], indirect=True)
def test_a_4xx_is_permanent_and_not_retried(receiver):
    sink = _sink(receiver.url)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE
        assert sink.pending_samples == 0
        assert sink.force_flush(1.0) is True
    finally:
        sink.shutdown()
    assert len(receiver.requests) == 1
    assert sink.rejected_samples > 0 and sink.retries == 0


@pytest.mark.parametrize("receiver", [[503, 429, 204]], indirect=True)
def test_5xx_and_429_are_retried_with_backoff_until_delivered(receiver):
    sink = _sink(receiver.url)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
    finally:
        sink.shutdown()
    assert len(receiver.requests) == 3 and sink.retries == 2
    assert receiver.requests[0][1] == receiver.requests[2][1]  # the same write, resent


def test_unreachable_receiver_keeps_the_backlog_within_its_bound():
    sink = _sink("http://127.0.0.1:9/api/v1/write", max_pending_samples=25)
    try:
        for i in range(5):
            snapshot = Snapshot((Gauge("loss", float(i)),), resource=RESOURCE)
            assert sink.export(snapshot, timeout_s=0.2) is ExportResult.FAILURE
        assert 0 < sink.pending_samples <= 25  # 2 samples (loss, target_info) per export
        assert sink.dropped_samples == 0
        sink.export(Snapshot((Gauge("x", 1.0),), resource=RESOURCE), timeout_s=0.2)
        assert sink.pending_samples <= 25 and sink.dropped_samples == 0
        for i in range(20):
            sink.export(Snapshot((Gauge("y", float(i)),), resource=RESOURCE), timeout_s=0.01)
        assert sink.pending_samples <= 25 and sink.dropped_samples > 0
    finally:
        sink.shutdown(0.1)


def test_contract(receiver):
    sink = _sink(receiver.url)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert sink.force_flush() is True
    finally:
        sink.shutdown()
    sink.shutdown()
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE


def test_refresh_rewrites_every_live_series(receiver):
    sink = _sink(receiver.url, interval_s=0.2)
    try:
        sink.export(SNAPSHOT)
        before = len(receiver.requests)
        threading.Event().wait(0.7)
        assert len(receiver.requests) > before
        names = {labels["__name__"] for labels, _ in receiver.requests[-1][1]}
        assert {"loss", "tokens_total", "kl_bucket", "kl_avg"} <= names
    finally:
        sink.shutdown()


@pytest.mark.parametrize(
    "section, message",
    [
        ({"enabled": True}, "remote_write.url"),
        ({"url": "ftp://x"}, "remote_write.url"),
        ({"url": "http://x", "timeout_s": 0}, "remote_write.timeout_s"),
        ({"url": "http://x", "external_labels": {"__x": "1"}}, "external_labels"),
        ({"url": "http://x", "external_labels": {"cluster": "1"}}, "external_labels"),
        ({"url": "http://x", "typo": 1}, "remote_write.typo"),
    ],
)
def test_config_is_strict_and_names_the_key(section, message):
    with pytest.raises(ConfigError, match=message):
        from_dict({"sinks": {"remote_write": section}})


def test_config_defaults_off_and_the_collector_builds_no_sink_then():
    sinks = from_dict({"sinks": {"prometheus": {"enabled": False}}}).sinks
    assert sinks.remote_write.enabled is False
    assert registry.build_sinks(sinks, shared=True) == []
