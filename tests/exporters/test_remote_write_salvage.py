"""A write a real Prometheus refuses for some of its samples delivers all the others.

Prometheus (2.42) refuses a whole remote-write request, HTTP 400, for one sample out of
order, out of bounds or a duplicate; :class:`~exporters.remote_write.salvage.Salvage` sends
it again in halves, and the sink counts only the samples refused alone.
"""

from __future__ import annotations

import math
import time

from exporters.base import ExportResult
from exporters.remote_write import client, kept_backlog, proto
from exporters.remote_write.health import DOWN
from exporters.remote_write.salvage import Salvage, per_sample
from telemetry.model.snapshot import Gauge, Snapshot
from tests.collector.test_remote_write_e2e import receiver, wait_for
from tests.collector.test_remote_write_receiver import stored
from tests.distributed import free_port
from tests.exporters.test_remote_write import _at, _delivered, _sink

HOUR_MS = 3_600_000


def _step(loss: float, reward: float) -> Snapshot:
    return Snapshot((Gauge("loss", loss), Gauge("reward", reward)))


def test_a_write_refused_for_one_held_sample_delivers_its_new_samples(tmp_path):
    """An earlier process kept a backlog (loss and reward at t+50, then at t+150) that
    Prometheus partly holds already (loss up to t+100): sent in one request, only loss at
    t+50 is refused; every other sample is stored and one sample is counted refused."""
    t0 = int(time.time() * 1000) - 60_000  # within the accepted age
    directory = tmp_path / "state"
    directory.mkdir()
    first = _sink(f"http://127.0.0.1:{free_port()}/api/v1/write", interval_s=3600.0)
    first.keep_in(directory)
    try:
        assert first.export(_at(_step(1.0, 10.0), t0 + 50)) is ExportResult.SUCCESS
        assert first.export(_at(_step(3.0, 30.0), t0 + 150)) is ExportResult.SUCCESS
        wait_for(lambda: first.health.state == DOWN, 30, "the sink sees no receiver")
    finally:
        first.shutdown(10)  # at once (the receiver is down): the backlog is kept
    writes, _ = kept_backlog.load(directory / kept_backlog.FILE)
    assert [samples for _, samples, _ in writes] == [3, 3]  # loss, reward, target_info
    loss = next(
        sorted(labels.items())
        for payload, _, _ in writes
        for labels, _ in proto.decode(payload)
        if labels["__name__"] == "loss"
    )

    with receiver(tmp_path, free_port()) as url:
        write = url + "/api/v1/write"
        for value, at_ms in ((0.1, t0 + 10), (2.0, t0 + 100)):  # loss, held up to t+100
            payload, _ = proto.encode([(loss, value, at_ms)])
            assert client.post(write, payload, 10)[0] is ExportResult.SUCCESS
        second = _sink(write, interval_s=3600.0)
        try:
            second.keep_in(directory)  # the kept writes, one batch
            assert _delivered(second)
            counts = second.health.counts()
        finally:
            second.shutdown(10)
        series = {name: stored(url, f'{name}{{collector="c1"}}') for name in ("loss", "reward")}
    assert series["loss"] == [(t0 + 10, 0.1), (t0 + 100, 2.0), (t0 + 150, 3.0)]
    assert series["reward"] == [(t0 + 50, 10.0), (t0 + 150, 30.0)]
    assert counts.rejected == 1 and counts.dropped["refused"] == 1
    assert counts.sent == 5 and counts.pending == 0  # 6 written, loss at t+50 refused


def test_halving_keeps_every_sample_prometheus_takes_in_order_within_the_bound(tmp_path):
    """21 series, 121 samples in the sink's order (s1's samples in one entry); Prometheus
    holds s1 up to t+100 and s4 up to t+70: s1's t+60 and t+80 are out of order, its t+100
    is a second value at a held time, s4's t+60 out of order, and s20's one sample is hours
    out of bounds. Exactly those 5 are refused, all 116 others stored, in fewer requests
    than one per sample."""
    t0 = int(time.time() * 1000) - 60_000

    def labels(i: int) -> tuple[tuple[str, str], ...]:
        return (("__name__", f"s{i}"), ("job", "salvage"))

    times = [t0 + 60 + 20 * k for k in range(6)]  # t+60 ... t+160
    request = proto.WriteRequest()
    for k, at_ms in enumerate(times):
        for i in (0, *range(2, 20)):
            ts = request.timeseries.add(labels=[{"name": n, "value": v} for n, v in labels(i)])
            ts.samples.add(value=float(k), timestamp=at_ms)
        if k == 2:  # out of bounds, in the middle of the request
            ts = request.timeseries.add(labels=[{"name": n, "value": v} for n, v in labels(20)])
            ts.samples.add(value=6.0, timestamp=t0 - 3 * HOUR_MS)
    ts = request.timeseries.add(labels=[{"name": n, "value": v} for n, v in labels(1)])
    for k, at_ms in enumerate(times):
        ts.samples.add(value=float(k), timestamp=at_ms)
    payload = request.SerializeToString()
    assert len(proto.each_sample(payload)) == 121

    with receiver(tmp_path, free_port()) as url:
        write = url + "/api/v1/write"
        held = [(labels(1), 1.0, t0 + 100), (labels(4), 1.0, t0 + 70)]
        taken = client.post(write, proto.encode(held)[0], 10)
        assert taken[0] is ExportResult.SUCCESS and not per_sample(*taken)
        alone, _ = proto.encode([(labels(4), 9.0, t0 + 60)])
        one = Salvage(alone, client.post(write, alone, 10)[1])  # refused: not sent again
        assert one.send(lambda part: client.post(write, part, 10))[0] is ExportResult.SUCCESS
        outcome, detail = client.post(write, payload, 10)
        assert per_sample(outcome, detail), detail
        malformed = client.post(write, b"\x0a\x05garbage", 10)
        assert malformed[0] is ExportResult.PERMANENT_FAILURE and not per_sample(*malformed)

        salvage = Salvage(payload, detail)
        assert salvage.send(lambda part: client.post(write, part, 10))[0] is ExportResult.SUCCESS
        found = {i: stored(url, f"s{i}") for i in range(21)}
    every = [(at_ms, float(k)) for k, at_ms in enumerate(times)]
    expected = {i: every for i in range(20)}
    expected |= {1: [(t0 + 100, 1.0), *every[3:]], 4: [(t0 + 70, 1.0), *every[1:]], 20: []}
    assert found == expected
    assert (salvage.taken, salvage.refused) == (116, 5)
    assert 2 * 5 <= salvage.requests <= 2 * 5 * math.ceil(math.log2(121)) < 121, salvage.requests
    assert (one.taken, one.refused, one.requests) == (0, 1, 0)
    assert any(text in salvage.detail for text in ("out of order", "out of bounds", "duplicate"))


def test_only_a_400_naming_a_refused_sample_is_split():
    """A 400 whose body names another cause, or another status, is not split."""
    refused = ExportResult.PERMANENT_FAILURE
    assert per_sample(refused, "HTTP 400: out of order sample")
    assert per_sample(refused, "HTTP 400: Out Of Bounds")
    assert not per_sample(refused, "HTTP 400: proto: illegal wireType 7")
    assert not per_sample(refused, "HTTP 409: out of order sample")
    assert not per_sample(ExportResult.FAILURE, "HTTP 400: out of order sample")
