"""A clean SIGTERM of ``rltel collector`` during a remote-write outage keeps the backlog.

A trainer's StatsLogger commits a step every 0.25 s over OTLP to a real ``rltel collector``
process that remote-writes into a real Prometheus (``--web.enable-remote-write-receiver``).
The receiver stops; once the collector reports the sink degraded it is SIGTERMed (it keeps
the undelivered writes in its durable state directory) and started again on the same port
while the trainer goes on; then the receiver comes back. Every committed step is in
Prometheus at its commit time (``query_range`` at 1 s counts each second's commits), nothing
was dropped or refused, and Prometheus counted no out-of-order sample.

The sink's refresher (which writes idle series at the current time) is set to an hour: its
write of the last step at the new collector's start would otherwise race the trainer's
spooled steps, committed earlier, which then go 1 ms after it instead of at their commit
time (what a scrape would do too: not this test's subject).
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from exporters.base import ExportResult
from exporters.remote_write import kept_backlog
from exporters.remote_write.health import DOWN
from tests.collector.conftest import samples, scrape
from tests.collector.test_integration import CollectorProcess
from tests.collector.test_remote_write_e2e import (
    Trainer,
    _every_step_at_its_commit_time,
    _flushed,
    _no_empty_second,
    receiver,
    remote_write,
    wait_for,
)
from tests.dashboards import servers
from tests.distributed import free_port
from tests.exporters.test_remote_write import SNAPSHOT, Receiver, _at, _delivered, _samples, _sink

pytestmark = pytest.mark.timeout(300)

NODE = "node-a"
DROPPED = "rltel_collector_remote_write_samples_dropped_total"
REJECTED = "rltel_collector_remote_write_samples_rejected_total"


def _config(url: str) -> dict:
    """The remote-write sink into ``url``, its refresher out of the scenario's way."""
    config = remote_write(NODE, url)
    config["remote_write"]["interval_s"] = 3600.0
    return config


def _degraded(collector: CollectorProcess) -> bool:
    url = collector.metrics_url.replace("/metrics", "/healthz")
    try:
        import urllib.request

        return urllib.request.urlopen(url, timeout=10).read().startswith(b"degraded:")
    except OSError:
        return False


def _refused(url: str) -> tuple[float, float]:
    """Samples Prometheus refused as out of order (its own counter, every type), and its
    remote-write answers that were not 2xx."""
    scraped = scrape(url + "/metrics")
    out_of_order = samples(scraped, "prometheus_tsdb_out_of_order_samples_total")
    writes = samples(scraped, "prometheus_http_requests_total", handler="/api/v1/write")
    assert out_of_order and writes, "Prometheus no longer exposes these counters"
    bad = sum(n for labels, n in writes.items() if not dict(labels)["code"].startswith("2"))
    return sum(out_of_order.values()), bad


def test_sigterm_during_an_outage_keeps_the_backlog_and_the_restart_sends_it_in_order(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the trainer's spool (runs/...) is this test's own
    prometheus, otlp = free_port(), free_port()
    url = f"http://127.0.0.1:{prometheus}"
    kept = tmp_path / "files" / ".collector-state" / str(otlp) / "shared" / "remote_write"
    first = CollectorProcess(tmp_path, _config(url), port=otlp)
    trainer = Trainer({NODE: first.endpoint})
    second = None
    try:
        with receiver(tmp_path, prometheus):
            trainer.start()
            start_s = time.time()
            time.sleep(2.0)  # the scenario's length, as every sleep here
        wait_for(lambda: _degraded(first), 60, "the sink reports the outage")
        time.sleep(1.0)
        assert first.stop(signal.SIGTERM, timeout=60) == 0, "".join(first.lines)
        assert (kept / "backlog.kept").exists(), "".join(first.lines)
        assert any("kept in" in line for line in first.lines), "".join(first.lines)
        second = CollectorProcess(tmp_path, _config(url), port=otlp)
        time.sleep(1.0)  # the trainer's spooled steps reach the new process; still no receiver
        with receiver(tmp_path, prometheus):
            trainer.stop.set()
            trainer.join(30)
            last = trainer.commits[NODE][-1][0]
            wait_for(lambda: _flushed(url, NODE, second, last), 120, "every step delivered")
            scraped = scrape(second.metrics_url)
            end_s = time.time()
            window = f"[{math.ceil(end_s - start_s) + 5}s]"
            steps = servers.api(
                url, "query", query=f'rltel_step{{collector="{NODE}"}}{window}', time=end_s
            )["result"]
            per_second = servers.api(
                url,
                "query_range",
                query=f'count_over_time(rltel_step{{collector="{NODE}"}}[1s])',
                start=math.ceil(start_s) + 1,
                end=math.floor(end_s) - 1,
                step=1,
            )["result"]
            refused = _refused(url)
            trainer.close()
            assert second.terminate() == 0, "".join(second.lines)
    finally:
        trainer.close()
        for collector in (first, second):
            if collector is not None and collector.proc.poll() is None:
                collector.terminate()
    assert trainer.error is None, trainer.error
    _every_step_at_its_commit_time(trainer.commits[NODE], steps)
    _no_empty_second(steps, per_second)
    assert sum(samples(scraped, DROPPED).values()) == 0, samples(scraped, DROPPED)
    assert sum(samples(scraped, REJECTED).values()) == 0
    assert refused == (0, 0)  # (out-of-order samples, refused writes)
    assert not Path(kept / "backlog.kept").exists()  # sent, so removed


def _down(sink) -> bool:
    return sink.health.state == DOWN


def test_a_kept_backlog_goes_first_and_later_samples_are_stamped_after_it(tmp_path):
    """In process: a sink shut down while its receiver answers 503 keeps its writes; the
    next sink on the same directory sends them first, then its own, each series in order."""
    t0 = int(time.time() * 1000) - 10_000  # commit times within the accepted age
    down = Receiver([503])
    first = _sink(down.url)
    first.keep_in(tmp_path)
    try:
        for ms in (t0 + 1000, t0 + 2000):
            assert first.export(_at(SNAPSHOT, ms)) is ExportResult.SUCCESS
        wait_for(lambda: _down(first), 30, "the sink sees the receiver down")
    finally:
        first.shutdown(30)
        down.close()
    assert (tmp_path / "backlog.kept").exists()
    assert first.health.counts().dropped["shutdown"] == 0

    up = Receiver([204])
    second = _sink(up.url)
    try:
        second.keep_in(tmp_path)
        assert second.export(_at(SNAPSHOT, t0 + 1500)) is ExportResult.SUCCESS  # goes after
        assert _delivered(second)
    finally:
        second.shutdown(10)
        up.close()
    by_series: dict[tuple, list[int]] = {}
    for labels, _, ts in _samples(up):
        if labels["__name__"] == "loss":
            by_series.setdefault(tuple(sorted(labels.items())), []).append(ts)
    assert list(by_series.values()) == [[t0 + 1000, t0 + 2000, t0 + 2001]]  # kept, then new
    assert not (tmp_path / "backlog.kept").exists()  # sent: removed


def test_a_damaged_kept_backlog_is_left_there_and_named(tmp_path, caplog):
    (tmp_path / "backlog.kept").write_bytes(b"RLRWKEPT1garbage")
    with pytest.raises(ValueError, match="backlog.kept"):
        kept_backlog.load(tmp_path / "backlog.kept")
    sink = _sink("http://127.0.0.1:9/api/v1/write")
    try:
        sink.keep_in(tmp_path)
    finally:
        sink.shutdown(0.1)
    assert "kept backlog unreadable" in caplog.text
    assert (tmp_path / "backlog.kept").exists()
