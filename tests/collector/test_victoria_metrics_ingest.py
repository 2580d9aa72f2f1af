"""What VictoriaMetrics stores of rltel's replayed, late and stale samples, beside Prometheus.

The remote-write sink orders each series' samples, ends vanished series with Prometheus's
staleness marker and drops writes older than ``max_sample_age_s`` because Prometheus refuses
a whole request for one out-of-order or out-of-bounds sample
(tests/collector/test_remote_write_receiver.py). The same writes go here to a real
``victoria-metrics`` with the recipe's flags (docs/stack.md, "At scale"), to one with its
default storage flags and a 1-day retention, and to a real Prometheus receiver; every write
is made first, and the stores are read once VictoriaMetrics has made it searchable.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
from prometheus_client.core import GaugeMetricFamily

from collector.config import RemoteWriteConfig
from exporters.base import ExportResult
from exporters.remote_write import RemoteWriteSink, client, proto
from exporters.remote_write.timeline import Timeline
from telemetry.model.snapshot import Gauge, Snapshot
from tests.collector.conftest import samples, scrape
from tests.collector.test_remote_write_e2e import receiver
from tests.collector.victoria import query, victoria_metrics
from tests.dashboards import servers
from tests.distributed import free_port

pytestmark = pytest.mark.timeout(120)

PLAIN = ("-search.latencyOffset=0s", "-retentionPeriod=1d")
"""VictoriaMetrics without the recipe's ``-dedup.minScrapeInterval``, a 1-day retention."""
EXACT = 0.1234567890123456789
RESOURCE = (("service.name", "trainer"), ("rltel.experiment", "exp"))


def labels(name: str) -> list[tuple[str, str]]:
    return [("__name__", name), ("job", "t")]


def post(url: str, batch: list[proto.Sample]) -> ExportResult:
    return client.post(url + "/api/v1/write", proto.encode(batch)[0], 10)[0]


@dataclass
class Written:
    """The stores, each write's answer per store, and the times the writes used (ms)."""

    stores: dict[str, str]
    answers: dict[tuple[str, str, int], ExportResult]
    now: int
    base: int
    late_counts: object = None


def _writes(now: int, base: int) -> dict[str, list[list[proto.Sample]]]:
    """Each scenario's requests, in order."""
    timeline = Timeline({"job": "t"})
    series: list[proto.Sample] = []
    for i in range(10):  # x ends with a staleness marker, y just stops
        families = [GaugeMetricFamily(n, n, value=float(i)) for n in ("x", "y")]
        series += timeline.stamp(families, base + 1000 * i)
    marker = timeline.ended([(("__name__", "x"), ("job", "t"))], base + 9000)
    counter = [(labels("c"), float(v), base + 1000 * i) for i, v in enumerate((1, 2, 3))]
    return {
        "out_of_order": [
            [(labels("a"), 1.0, now)],
            [(labels("b"), 2.0, now), (labels("a"), 0.5, now - 1000)],
        ],
        "out_of_bounds": [[(labels("c_new"), 3.0, now), (labels("d"), 4.0, now - 7_200_000)]],
        "retention": [[(labels("r"), 1.0, now), (labels("s"), 2.0, now - 3 * 86_400_000)]],
        "replay": [
            [(labels("p"), 1.0, now - 2000), (labels("p"), 2.0, now - 1000)],
            [(labels("p"), 1.0, now - 2000), (labels("q"), 5.0, now)],  # step replayed
        ],
        "stale": [series, marker],
        "nan": [[(labels("n"), math.nan, now - 500), (labels("v"), EXACT, now - 500)]],
        "counter": [counter],
        "sentinel": [[(labels("sentinel"), 1.0, now)]],
    }


def _late_through_the_sink(url: str, now: int):
    """The sink writes loss at now, now - 1 s (late: just after now) and now + 5 ms."""
    config = RemoteWriteConfig(enabled=True, url=url + "/api/v1/write", collector="c1")
    sink = RemoteWriteSink(config)
    try:
        for value, at_ms in ((1.0, now), (2.0, now - 1000), (3.0, now + 5)):
            snapshot = Snapshot(
                (Gauge("loss", value),), resource=RESOURCE, time_unix_nano=at_ms * 10**6
            )
            assert sink.export(snapshot) is ExportResult.SUCCESS
        assert sink.force_flush(10)
        return sink.health.counts()
    finally:
        sink.shutdown(5)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Iterator[Written]:
    tmp = tmp_path_factory.mktemp("ingest")
    with ExitStack() as stack:
        stores = {
            "victoria": stack.enter_context(victoria_metrics(tmp / "vm")),
            "plain": stack.enter_context(victoria_metrics(tmp / "plain", PLAIN)),
            "prometheus": stack.enter_context(receiver(tmp, free_port())),
        }
        now = int(time.time() * 1000)
        # two minutes back, half a second past a whole second: the range query's 1 s steps
        # fall 0.5 s from the edges of y's staleness window, wherever the clock stood
        base = (now // 1000 - 120) * 1000 + 500
        answers = {}
        late = _late_through_the_sink(stores["victoria"], now)
        for scenario, requests in _writes(now, base).items():
            for name, url in stores.items():
                for i, batch in enumerate(requests):
                    answers[(scenario, name, i)] = post(url, batch)
        for name in ("victoria", "plain"):  # searchable within about a second
            assert servers.until(lambda u=stores[name]: _raw(u, "sentinel"), 30), name
        yield Written(stores, answers, now, base, late)


def _raw(url: str, selector: str) -> list[tuple[int, float]]:
    """The stored samples of ``selector`` in the last 4 days (one series at most)."""
    result = query(url, "query", query=f"{selector}[4d]")["result"]
    assert len(result) <= 1, result
    return [(round(float(t) * 1000), float(v)) for t, v in result[0]["values"]] if result else []


def _at(url: str, expr: str, at_ms: int) -> dict[tuple, float]:
    result = query(url, "query", query=expr, time=at_ms / 1000)["result"]
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}


def test_an_out_of_order_or_old_sample_is_stored_where_prometheus_refuses_the_request(written):
    now, ok, refused = written.now, ExportResult.SUCCESS, ExportResult.PERMANENT_FAILURE
    vm, prometheus = written.stores["victoria"], written.stores["prometheus"]
    assert [written.answers[("out_of_order", "victoria", i)] for i in (0, 1)] == [ok, ok]
    assert _raw(vm, "a") == [(now - 1000, 0.5), (now, 1.0)] and _raw(vm, "b") == [(now, 2.0)]
    assert written.answers[("out_of_bounds", "victoria", 0)] is ok
    assert _raw(vm, "d") == [(now - 7_200_000, 4.0)] and _raw(vm, "c_new") == [(now, 3.0)]
    assert written.answers[("out_of_order", "prometheus", 1)] is refused
    assert written.answers[("out_of_bounds", "prometheus", 0)] is refused
    assert _raw(prometheus, "a") == [(now, 1.0)] and _raw(prometheus, "d") == []


def test_a_sample_past_the_retention_is_answered_204_and_dropped(written):
    plain = written.stores["plain"]
    assert written.answers[("retention", "plain", 0)] is ExportResult.SUCCESS
    assert _raw(plain, "r") == [(written.now, 1.0)] and _raw(plain, "s") == []
    ignored = samples(scrape(plain + "/metrics"), "vm_rows_ignored_total", reason="small_timestamp")
    assert sum(ignored.values()) == 1


def test_a_replayed_step_is_kept_once_with_dedup_and_twice_without(written):
    now, ok = written.now, ExportResult.SUCCESS
    once = [(now - 2000, 1.0), (now - 1000, 2.0)]
    for name in ("victoria", "plain"):
        assert [written.answers[("replay", name, i)] for i in (0, 1)] == [ok, ok]
        assert _raw(written.stores[name], "q") == [(now, 5.0)]
    assert _raw(written.stores["victoria"], "p") == once
    assert sorted(_raw(written.stores["plain"], "p")) == sorted([once[0], *once])
    count = "count_over_time(p[1m])"
    assert _at(written.stores["victoria"], count, now) == {(("job", "t"),): 2.0}
    assert _at(written.stores["plain"], count, now) == {(("job", "t"),): 3.0}
    prometheus = written.stores["prometheus"]
    assert written.answers[("replay", "prometheus", 1)] is ExportResult.PERMANENT_FAILURE
    assert _raw(prometheus, "p") == once and _raw(prometheus, "q") == []


def test_the_sink_writes_a_late_sample_just_after_its_series_last(written):
    loss = _raw(written.stores["victoria"], 'loss{collector="c1"}')
    now = written.now
    assert loss == [(now, 1.0), (now + 1, 2.0), (now + 5, 3.0)]
    counts = written.late_counts
    assert counts.late == 2 and counts.rejected == 0 and counts.sent == 6  # loss, target_info


def test_a_staleness_marker_ends_the_series_at_once_on_both_stores(written):
    base = written.base
    for name in ("victoria", "prometheus"):
        url = written.stores[name]
        assert _at(url, "x", base + 8500) == {(("__name__", "x"), ("job", "t")): 8.0}, name
        assert _at(url, "x", base + 9500) == {}, name  # marker at base + 9001
        assert _at(url, "y", base + 69_000) == {(("__name__", "y"), ("job", "t")): 9.0}, name


def test_a_range_query_reads_a_vanished_series_for_5_of_its_intervals_not_5_minutes(written):
    """y was written every second, last at base + 9 s, and never ended: a graph at a 1 s
    step shows it 5 s on in VictoriaMetrics (5 sample intervals), to the end in Prometheus."""
    last, start, end = written.base + 9000, written.base // 1000 + 5, written.base // 1000 + 60
    shown = {}
    for name in ("victoria", "prometheus"):
        data = query(written.stores[name], "query_range", query="y", start=start, end=end, step=1)
        shown[name] = [round(float(t) * 1000) for t, _ in data["result"][0]["values"]]
    assert shown["prometheus"] == list(range(start * 1000, end * 1000 + 1, 1000))
    assert shown["victoria"] == [t for t in shown["prometheus"] if t - last <= 5000]


def test_a_nan_sample_is_dropped_and_x_ne_x_never_holds(written):
    at = written.now
    vm, prometheus = written.stores["victoria"], written.stores["prometheus"]
    assert _raw(vm, "n") == [] and _at(vm, "n != n", at) == {}
    (value,) = _at(prometheus, "n != n", at).values()
    assert math.isnan(value)


def test_changes_counts_the_step_from_the_sample_before_the_window(written):
    at = written.base + 2000  # c = 1, 2, 3 at base, base + 1 s, base + 2 s
    expected = {"victoria": 2.0, "prometheus": 1.0}
    for name, count in expected.items():
        assert _at(written.stores[name], "changes(c[1500ms])", at) == {(("job", "t"),): count}


def test_over_time_rollups_keep_the_metric_name(written):
    at = written.base + 2000
    assert _at(written.stores["victoria"], "max_over_time(c[5s])", at) == {
        (("__name__", "c"), ("job", "t")): 3.0
    }
    assert _at(written.stores["prometheus"], "max_over_time(c[5s])", at) == {(("job", "t"),): 3.0}


def test_values_keep_about_twelve_significant_digits(written):
    at = written.now
    (stored,) = _at(written.stores["victoria"], "v", at).values()
    assert stored != EXACT and math.isclose(stored, EXACT, rel_tol=1e-12)
    assert _at(written.stores["prometheus"], "v", at) == {(("__name__", "v"), ("job", "t")): EXACT}
