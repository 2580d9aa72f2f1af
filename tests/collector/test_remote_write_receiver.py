"""What a real Prometheus receiver refuses, and that the remote-write sink never sends it.

Prometheus refuses a whole write request for one sample that is out of order (older than its
series' last) or out of bounds (more than 1 h older than its newest sample): the sink keeps
each series in order (``Timeline``) and drops writes past ``max_sample_age_s`` unsent.
"""

from __future__ import annotations

import time

from collector.config import RemoteWriteConfig
from exporters.base import ExportResult
from exporters.remote_write import RemoteWriteSink, client, proto
from telemetry.model.snapshot import Gauge, Snapshot
from tests.collector.test_remote_write_e2e import receiver
from tests.dashboards import servers
from tests.distributed import free_port

RESOURCE = (("service.name", "trainer"), ("rltel.experiment", "exp"))


def labels(name: str) -> list[tuple[str, str]]:
    return [("__name__", name), ("job", "test")]


def stored(url: str, name: str) -> list[tuple[int, float]]:
    result = servers.api(url, "query", query=f"{name}[2h]")["result"]
    return [(round(float(t) * 1000), float(v)) for t, v in result[0]["values"]] if result else []


def test_one_out_of_order_or_too_old_sample_refuses_the_whole_request(tmp_path):
    now = int(time.time() * 1000)
    with receiver(tmp_path, free_port()) as url:
        write = url + "/api/v1/write"
        payload, _ = proto.encode([(labels("a"), 1.0, now)])
        assert client.post(write, payload, 10)[0] is ExportResult.SUCCESS
        late, _ = proto.encode([(labels("b"), 2.0, now), (labels("a"), 0.5, now - 1000)])
        outcome, detail = client.post(write, late, 10)
        assert outcome is ExportResult.PERMANENT_FAILURE and "out of order" in detail
        old, _ = proto.encode([(labels("c"), 3.0, now), (labels("d"), 4.0, now - 7_200_000)])
        outcome, detail = client.post(write, old, 10)
        assert outcome is ExportResult.PERMANENT_FAILURE and "out of bounds" in detail
        assert stored(url, "a") == [(now, 1.0)]
        assert stored(url, "b") == [] and stored(url, "c") == []  # refused with the bad one


def test_the_sink_writes_a_late_sample_just_after_its_series_last_and_is_never_refused(tmp_path):
    now = int(time.time() * 1000)
    with receiver(tmp_path, free_port()) as url:
        config = RemoteWriteConfig(enabled=True, url=url + "/api/v1/write", collector="c1")
        sink = RemoteWriteSink(config)
        try:
            for value, at_ms in ((1.0, now), (2.0, now - 1000), (3.0, now + 5)):
                point = (Gauge("loss", value),)
                snapshot = Snapshot(point, resource=RESOURCE, time_unix_nano=at_ms * 10**6)
                assert sink.export(snapshot) is ExportResult.SUCCESS
            assert sink.force_flush(10)
            counts = sink.health.counts()
            loss = stored(url, 'loss{collector="c1"}')
        finally:
            sink.shutdown(5)
    assert loss == [(now, 1.0), (now + 1, 2.0), (now + 5, 3.0)]
    assert counts.late == 2 and counts.rejected == 0 and counts.sent == 6  # loss, target_info
