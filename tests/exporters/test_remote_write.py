"""The remote-write sink against a local HTTP receiver: wire format, retry policy, contract."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from collector.config import RemoteWriteConfig, SinksConfig, from_dict
from exporters import registry
from exporters.base import ExportResult
from exporters.factory import BuildContext
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
    """Answers each POST with the next status of ``statuses`` (the last one repeats), each
    once ``gate`` is set."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.gate = threading.Event()
        self.gate.set()
        self.requests: list[tuple[dict[str, str], list]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.gate.wait(30)
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


def _delivered(sink: RemoteWriteSink, timeout_s: float = 20.0) -> bool:
    """Wait until the backlog is delivered (``force_flush`` does not wait while the receiver
    is down)."""
    deadline = time.monotonic() + timeout_s
    while not sink.force_flush(1.0) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    return sink.pending_samples == 0


def _at(snapshot: Snapshot, ms: int) -> Snapshot:
    return dataclasses.replace(snapshot, time_unix_nano=ms * 1_000_000)


def _samples(receiver: Receiver) -> list[tuple[dict[str, str], float, int]]:
    return [
        (labels, value, ts)
        for _, series in receiver.requests
        for labels, samples in series
        for value, ts in samples
    ]


def test_wire_format_names_and_external_labels(receiver):
    sink = _sink(receiver.url, external_labels={"region": "eu"})
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert sink.force_flush(10)
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


def test_samples_carry_their_commit_time_and_only_touched_series_are_written(receiver):
    sink = _sink(receiver.url)
    other = Snapshot((Gauge("loss", 0.7),), resource=(("service.name", "other"),))
    t = int(time.time() * 1000) - 10_000
    try:
        sink.export(_at(SNAPSHOT, t))
        sink.export(_at(other, t + 250))
        assert sink.force_flush(10)
    finally:
        sink.shutdown()
    stamps = {(labels["job"], labels["__name__"]): ts for labels, _, ts in _samples(receiver)}
    assert stamps[("trainer", "loss")] == t
    assert stamps[("trainer", "kl_bucket")] == t
    assert stamps[("other", "loss")] == t + 250
    assert {job for job, _ in stamps} == {"trainer", "other"}
    assert len(_samples(receiver)) == len(stamps) + 1  # kl_bucket: two le values


def test_a_sample_committed_before_its_series_last_one_is_written_just_after_it(receiver):
    sink = _sink(receiver.url)
    loss = Snapshot((Gauge("loss", 1.0),), resource=RESOURCE)
    t = int(time.time() * 1000) - 10_000
    try:
        sink.export(_at(loss, t))
        sink.export(_at(dataclasses.replace(loss, points=(Gauge("loss", 2.0),)), t))
        sink.export(_at(dataclasses.replace(loss, points=(Gauge("loss", 3.0),)), t - 1000))
        sink.export(_at(dataclasses.replace(loss, points=(Gauge("loss", 4.0),)), t + 3))
        assert sink.force_flush(10)
    finally:
        sink.shutdown()
    losses = [
        (value, ts) for labels, value, ts in _samples(receiver) if labels["__name__"] == "loss"
    ]
    assert losses == [(1.0, t), (2.0, t + 1), (3.0, t + 2), (4.0, t + 3)]
    # two loss samples moved, and one target_info: its second at t is the first again
    assert sink.health.counts().late == 3


@pytest.mark.parametrize("receiver", [[400]], indirect=True)
def test_a_refused_write_is_dropped_counted_and_logged_once_then_summarized(receiver, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    config = RemoteWriteConfig(enabled=True, url=receiver.url, collector="c1")
    sink = RemoteWriteSink(config, summary_s=3600.0)
    t = int(time.time() * 1000)  # a commit time each (target_info's sample again at one is not)
    try:
        for i in range(4):
            snapshot = _at(Snapshot((Gauge("loss", float(i)),), resource=RESOURCE), t + i)
            assert sink.export(snapshot) is ExportResult.SUCCESS
            assert sink.force_flush(10)
        sink.health.summary_s = 0.0
        sink.export(_at(Snapshot((Gauge("loss", 9.0),), resource=RESOURCE), t + 4))
        assert sink.force_flush(10)
        counts = sink.health.counts()
        problem = sink.health.problem()
    finally:
        sink.shutdown()
    assert len(receiver.requests) == 5 and counts.retries == 0 and counts.sent == 0
    assert counts.rejected == 10 and counts.dropped["refused"] == 10  # loss, target_info
    assert counts.pending == 0 and counts.state == "refusing"
    assert problem is not None and "refusing" in problem
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("exporters.remote")]
    assert len(lines) == 2, lines
    assert "refused (HTTP 400" in lines[0] and "a summary follows" in lines[0]
    assert "refused requests" in lines[1] and "refusing for" in lines[1]


@pytest.mark.parametrize("receiver", [[503, 429, 204]], indirect=True)
def test_5xx_and_429_are_retried_with_backoff_until_delivered(receiver, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    sink = _sink(receiver.url)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert _delivered(sink)
        counts = sink.health.counts()
    finally:
        sink.shutdown()
    assert len(receiver.requests) == 3 and counts.retries == 2
    assert receiver.requests[0][1] == receiver.requests[2][1]  # the same write, resent
    assert counts.sent == len(receiver.requests[2][1]) and counts.state == "ok"
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("exporters.remote")]
    assert len(lines) == 2 and "unavailable (HTTP 503" in lines[0]
    assert "accepted again" in lines[1]


def test_an_unreachable_receiver_bounds_the_backlog_and_logs_the_drops_once(caplog):
    sink = _sink("http://127.0.0.1:9/api/v1/write", max_pending_samples=25)
    t = int(time.time() * 1000)  # a commit time each (target_info's sample again at one is not)
    try:
        for i in range(12):  # 2 samples (loss, target_info) per export
            snapshot = _at(Snapshot((Gauge("loss", float(i)),), resource=RESOURCE), t + i)
            assert sink.export(snapshot) is ExportResult.SUCCESS
        assert sink.pending_samples == 24 and sink.health.counts().dropped["backlog_full"] == 0
        assert sink.force_flush(10) is False  # at once: the receiver is down
        for i in range(20):
            sink.export(_at(Snapshot((Gauge("y", float(i)),), resource=RESOURCE), t + 12 + i))
            assert sink.pending_samples - sink._writes.sending <= 25  # the batch being sent aside
        counts = sink.health.counts()
        waiting = counts.pending - sink._writes.sending
    finally:
        sink.shutdown(0.2)
    assert waiting >= 24  # only what did not fit was dropped
    assert counts.dropped["backlog_full"] == 2 * 32 - counts.pending > 0
    assert sink.health.counts().dropped["shutdown"] == counts.pending
    drops = [r.getMessage() for r in caplog.records if "backlog full" in r.getMessage()]
    assert len(drops) == 1 and "max_pending_samples=25" in drops[0]


def test_writes_past_the_accepted_age_are_dropped_unsent_and_counted(receiver):
    sink = _sink(receiver.url, max_sample_age_s=60.0)
    now_ms = int(time.time() * 1000)
    try:
        sink.export(_at(Snapshot((Gauge("old", 1.0),), resource=RESOURCE), now_ms - 61_000))
        sink.export(_at(Snapshot((Gauge("new", 2.0),), resource=RESOURCE), now_ms - 59_000))
        assert sink.force_flush(10)
        counts = sink.health.counts()
    finally:
        sink.shutdown()
    names = {labels["__name__"] for labels, _, _ in _samples(receiver)}
    assert "new" in names and "old" not in names
    assert counts.dropped["too_old"] == 2 and counts.sent == 2


def test_after_a_loss_the_refresh_rewrites_every_total_so_histograms_reconverge(receiver):
    sink = _sink(receiver.url, max_pending_samples=30, interval_s=3600.0)
    window = Histogram("kl", 2, 3.0, 1.0, 2.0, (1.5,), (1, 1))
    receiver.gate.clear()  # the receiver holds the first POST: the backlog fills, then drops
    try:
        for _ in range(10):  # 8 samples each: kl_bucket x2, _count, _sum, avg/min/max, target
            sink.export(Snapshot((window,), resource=RESOURCE))
        receiver.gate.set()
        assert sink.force_flush(10)
        assert sink.health.counts().dropped["backlog_full"] > 0
        before = len(receiver.requests)
        sink.refresh()  # after a drop: every series, not only idle ones
        assert sink.force_flush(10)
    finally:
        sink.shutdown()
    last = {
        (labels["__name__"], labels.get("le")): value
        for _, series in receiver.requests[before:]
        for labels, samples in series
        for value, _ in samples
    }
    assert last[("kl_count", None)] == 20 and last[("kl_sum", None)] == 30.0
    assert last[("kl_bucket", "1.5")] == 10 and last[("kl_bucket", "+Inf")] == 20


def test_contract(receiver):
    sink = _sink(receiver.url)
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert sink.force_flush() is True
    finally:
        sink.shutdown()
    sink.shutdown()
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE


def test_refresh_rewrites_idle_series_and_the_collectors_own_metrics(receiver):
    sink = _sink(receiver.url, interval_s=0.2)
    wanted = {"loss", "tokens_total", "kl_bucket", "kl_avg", "up"}

    def refreshed() -> list[dict[str, str]]:
        return [labels for _, series in receiver.requests[before:] for labels, _ in series]

    try:
        sink.export(SNAPSHOT)
        assert sink.force_flush(10)
        before = len(receiver.requests)
        deadline = time.monotonic() + 20
        # A refresh within interval_s of the write finds the series not idle yet and writes
        # the collector's own metrics alone: wait for the one that rewrites the idle series.
        while not wanted <= {labels["__name__"] for labels in refreshed()}:
            assert time.monotonic() < deadline, "no refresh rewrote the idle series in 20 s"
            threading.Event().wait(0.05)
        assert sink.force_flush(10)
    finally:
        sink.shutdown()
    names = {labels["__name__"] for labels in refreshed()}
    assert wanted <= names
    assert "rltel_collector_remote_write_samples_sent_total" in names
    assert "rltel_prometheus_overflow_points_total" in names  # the series store's own
    own = [labels for labels in refreshed() if labels["__name__"] == "up"]
    assert own[0]["job"] == "rltel-collector" and own[0]["instance"] == "c1"
    assert own[0]["collector"] == "c1" and own[0]["cluster"] == "k"


def test_self_metrics_off_writes_only_the_series(receiver):
    sink = _sink(receiver.url, interval_s=3600.0, self_metrics=False)
    try:
        sink.export(SNAPSHOT)
        sink.refresh()
        assert sink.force_flush(10)
    finally:
        sink.shutdown()
    names = {labels["__name__"] for labels, _, _ in _samples(receiver)}
    assert "up" not in names and not any(n.startswith("rltel_") for n in names)


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
