"""The collector's own Prometheus families: each collector's ``describe()`` names exactly the
families its ``collect()`` yields, and the names the sinks reserve from ``describe()`` are the
ones the hand-kept ``FAMILIES`` dicts reserved before (``reserved_families.txt``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.config import from_dict
from collector.server import CollectorServer
from exporters.prometheus import PrometheusSink
from exporters.prometheus.families import Family, declared, describe
from exporters.remote_write import RemoteWriteSink
from telemetry.heartbeat import HeartbeatCollector

RESERVED = Path(__file__).with_name("reserved_families.txt")


@pytest.fixture
def full(tmp_path, monkeypatch):
    """A collector with every source of its own families (remote write, trace forwarding,
    a scrape target) and the collectors it registered on each sink, not started."""
    registered: list[tuple[str, object]] = []

    def recording(method, sink: str):
        def record(self, collector, *args, **kwargs):
            registered.append((sink, collector))
            return method(self, collector, *args, **kwargs)

        return record

    monkeypatch.setattr(
        PrometheusSink, "register", recording(PrometheusSink.register, "prometheus")
    )
    monkeypatch.setattr(
        RemoteWriteSink, "add_source", recording(RemoteWriteSink.add_source, "remote_write")
    )
    nowhere = "127.0.0.1:9"  # nothing listens on port 9; nothing is sent before a start
    config = from_dict(
        {
            "receiver": {"port": 0},
            "sinks": {
                "fileroot": str(tmp_path),
                "prometheus": {"port": 0},
                "remote_write": {
                    "enabled": True,
                    "url": f"http://{nowhere}/api/v1/write",
                    "collector": "node-a",
                },
            },
            "traces": {"forward": {"endpoint": nowhere}},
            "scrape": {
                "targets": [{"url": f"http://{nowhere}/metrics", "experiment": "e", "trial": "t"}]
            },
        }
    )
    server = CollectorServer(config)
    yield server, registered
    server.stop(1.0)


def _kinds(families) -> dict[str, str]:
    return {family.name: family.type for family in families}


def test_every_registered_collector_describes_what_it_collects(full):
    _, registered = full
    kinds = {type(collector).__name__ for _, collector in registered}
    assert kinds == {
        "SelfMetrics",
        "TraceMetrics",
        "ScrapeHealth",
        "LinkHealth",
        "HeartbeatBoard",
        "Up",
    }
    for sink, collector in registered:
        described = _kinds(collector.describe())
        assert described == _kinds(collector.collect()), (sink, type(collector).__name__)
        assert not any(family.samples for family in collector.describe())


def test_the_reserved_names_are_the_ones_kept_by_hand_before(full):
    server, _ = full
    write = next(
        q.sink for q in server.pipeline.shared.queued if isinstance(q.sink, RemoteWriteSink)
    )
    now = {
        *(f"prometheus {name}" for name in server.prometheus._store.reserved),
        *(f"remote_write {name}" for name in write._store.reserved),
    }
    assert now == set(RESERVED.read_text().split("\n")) - {""}


def test_the_in_process_collectors_describe_what_they_collect():
    from exporters.fanout import FanOut
    from exporters.prometheus import QueueMetrics

    fanout = FanOut([], timeout_s=1.0)
    for collector in (QueueMetrics(fanout, "exp_t1"), HeartbeatCollector(tuple)):
        assert _kinds(collector.describe()) == _kinds(collector.collect())


def test_declared_reads_names_and_kinds_and_refuses_what_it_cannot_reserve():
    class Described:
        def __init__(self, *families):
            self.families = families

        def describe(self):
            return describe(self.families)

    counter = Family("x", "counter", "help", ("label",))
    assert declared(Described(counter, Family("y_total", "counter", "y"))) == {
        "x": "counter",
        "y": "counter",  # prometheus_client names a counter family without _total
    }
    with pytest.raises(ValueError, match="names no family"):
        declared(Described())
    info = Described()
    info.describe = lambda: [type("I", (), {"name": "i", "type": "info"})()]
    with pytest.raises(ValueError, match="family i: type info"):
        declared(info)
