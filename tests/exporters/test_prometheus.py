"""PrometheusSink: scraped over real HTTP, parsed with prometheus_client's own parsers."""

from __future__ import annotations

import gzip
import math
import re
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporters.base import ExportResult, Sink
from exporters.factory import BuildContext
from exporters.fanout import FanOut
from exporters.prometheus import PrometheusSink, QueueMetrics
from rltel.logger import StatsLogger
from telemetry.config import PrometheusConfig, StatsLoggerConfig
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
RESOURCE = (
    ("service.name", "rltel-trainer"),
    ("rltel.experiment", "exp"),
    ("rltel.trial", "t1"),
    ("rltel.role", "trainer"),
    ("rltel.rank", 0),
    ("host.name", "node0"),
)
BASE = {"job": "rltel-trainer", "instance": "node0:rank0", "experiment": "exp", "trial": "t1"}
BASE["role"] = "trainer"


def contract_config(tmp_path, stack):
    """The Prometheus sink of the sink contract (tests/exporters/test_base.py)."""
    return StatsLoggerConfig(prometheus=PrometheusConfig(enabled=True, port=0)), BuildContext()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def make_sink(clock):
    sinks = []

    def make(**overrides) -> PrometheusSink:
        sink = PrometheusSink(PrometheusConfig(port=0, **overrides), clock=clock)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.shutdown()


def scrape(sink: PrometheusSink, accept: str = "", gzip_ok: bool = False) -> str:
    headers = {"Accept": accept} if accept else {}
    if gzip_ok:
        headers["Accept-Encoding"] = "gzip"
    with urllib.request.urlopen(urllib.request.Request(sink.url, headers=headers)) as resp:
        body = resp.read()
        if resp.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body.decode()


def families(text: str, openmetrics: bool = False) -> dict[str, Metric]:
    parser = parse_openmetrics if openmetrics else parse_text
    return {family.name: family for family in parser(text)}


def samples(family: Metric) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def value(family: Metric, name: str, **labels) -> float:
    matches = [
        s.value
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (name, labels, family.samples)
    return matches[0]


def window(metric: str, values: np.ndarray, bounds=(), **kw) -> Histogram:
    """A histogram window computed from raw values (upper-inclusive buckets)."""
    counts = ()
    if bounds:
        counts = tuple(
            int(n) for n in np.bincount(np.searchsorted(bounds, values), minlength=len(bounds) + 1)
        )
    return Histogram(
        metric,
        int(values.size),
        float(values.sum()),
        float(values.min()) if values.size else None,
        float(values.max()) if values.size else None,
        tuple(bounds),
        counts,
        **kw,
    )


def snap(*points, step=1, resource=RESOURCE) -> Snapshot:
    return Snapshot(points=tuple(points), step=Step(0, step, step), resource=resource)


def test_names_types_labels_and_target_info(make_sink):
    sink = make_sink()
    rng = np.random.default_rng(0)
    loss = rng.normal(size=50)
    points = (
        window("ppo_actor/update/loss", loss, (-1.0, 0.0, 1.0)),
        ScalarMean("timeperf/train_step", 2.5, count=1, unit="s"),
        Counter("train_perf/tokens", 4096.0, unit="{token}"),
        Counter("train_perf/time", 12.5, unit="s"),
        Gauge("moe_balance/max_over_ideal", 1.25, unit="1", attributes=(("layer", 3),)),
        Gauge("eval/acc", 0.5, attributes=(("role", "judge"),)),
    )
    assert sink.export(snap(*points)) is ExportResult.SUCCESS
    fams = families(scrape(sink))
    expected_types = {
        "ppo_actor_update_loss": "histogram",
        "ppo_actor_update_loss_avg": "gauge",
        "ppo_actor_update_loss_min": "gauge",
        "ppo_actor_update_loss_max": "gauge",
        "timeperf_train_step_seconds": "gauge",
        "train_perf_tokens": "counter",
        "train_perf_time_seconds": "counter",
        "moe_balance_max_over_ideal_ratio": "gauge",
        "eval_acc": "gauge",
        "target_info": "gauge",
    }
    for name, kind in expected_types.items():
        assert fams[name].type == kind, name
    assert value(fams["train_perf_tokens"], "train_perf_tokens_total", **BASE) == 4096.0
    assert value(fams["train_perf_time_seconds"], "train_perf_time_seconds_total") == 12.5
    assert value(fams["timeperf_train_step_seconds"], "timeperf_train_step_seconds", **BASE) == 2.5
    moe = fams["moe_balance_max_over_ideal_ratio"].samples[0]
    assert moe.labels == {**BASE, "layer": "3"}
    # a point attribute that clashes with a resource label keeps both
    assert fams["eval_acc"].samples[0].labels == {**BASE, "exported_role": "judge"}
    loss_fam = fams["ppo_actor_update_loss"]
    assert value(loss_fam, "ppo_actor_update_loss_count") == 50
    assert value(fams["ppo_actor_update_loss_avg"], "ppo_actor_update_loss_avg") == pytest.approx(
        loss.mean()
    )
    assert value(fams["ppo_actor_update_loss_min"], "ppo_actor_update_loss_min") == loss.min()
    assert value(fams["ppo_actor_update_loss_max"], "ppo_actor_update_loss_max") == loss.max()
    info = fams["target_info"].samples[0].labels
    assert info["job"] == "rltel-trainer" and info["instance"] == "node0:rank0"
    assert info["rltel_experiment"] == "exp" and info["host_name"] == "node0"
    assert "service_name" not in info
    # the step is never a label
    assert all("step" not in s.labels for f in fams.values() for s in f.samples)
    # OpenMetrics parses too, with UNIT metadata where the name carries it
    om = families(scrape(sink, OPENMETRICS), openmetrics=True)
    assert om["timeperf_train_step_seconds"].unit == "seconds"
    assert om["train_perf_tokens"].type == "counter"


def test_negative_bounds_keep_count_and_sum(make_sink):
    sink = make_sink()
    rng = np.random.default_rng(1)
    logprobs = -rng.exponential(2.0, size=200)
    bounds = (-8.0, -4.0, -2.0, -1.0, -0.5)
    sink.export(
        snap(window("ppo_actor/logprob", logprobs, bounds), window("r", logprobs + 9, (1.0, 5.0)))
    )
    text = scrape(sink)
    fam = families(text)["ppo_actor_logprob"]
    assert value(fam, "ppo_actor_logprob_count") == 200
    assert value(fam, "ppo_actor_logprob_sum") == pytest.approx(logprobs.sum())
    for bound in (*bounds, math.inf):
        le = "+Inf" if bound == math.inf else repr(bound)
        expected = int((logprobs <= bound).sum())
        assert value(fam, "ppo_actor_logprob_bucket", le=le) == expected
    # OpenMetrics 1.0 forbids _sum with negative buckets: that series keeps only buckets
    om = families(scrape(sink, OPENMETRICS), openmetrics=True)
    names = {s.name for s in om["ppo_actor_logprob"].samples}
    assert names == {"ppo_actor_logprob_bucket"}
    assert {s.name for s in om["r"].samples} == {"r_bucket", "r_count", "r_sum"}


def test_delta_windows_accumulate_to_cumulative(make_sink):
    sink = make_sink()
    rng = np.random.default_rng(2)
    bounds = (-1.0, 0.0, 0.5, 2.0)
    windows = [rng.normal(size=rng.integers(1, 40)) for _ in range(6)]
    for step, values in enumerate(windows):
        sink.export(
            snap(window("adv", values, bounds), Counter("tok", 100.0 * (step + 1)), step=step)
        )
    fams = families(scrape(sink))
    everything = np.concatenate(windows)
    hist = fams["adv"]
    assert value(hist, "adv_count") == everything.size
    assert value(hist, "adv_sum") == pytest.approx(everything.sum())
    for bound in bounds:
        assert value(hist, "adv_bucket", le=repr(bound)) == int((everything <= bound).sum())
    assert value(fams["adv_avg"], "adv_avg") == pytest.approx(windows[-1].mean())
    assert value(fams["adv_max"], "adv_max") == windows[-1].max()
    assert value(fams["tok"], "tok_total") == 600.0  # counters are cumulative already
    # an empty window adds nothing and keeps the last window's gauges
    sink.export(snap(Histogram("adv", 0, 0.0, bounds=bounds, bucket_counts=(0,) * 5)))
    fams = families(scrape(sink))
    assert value(fams["adv"], "adv_count") == everything.size
    assert value(fams["adv_min"], "adv_min") == windows[-1].min()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nonfinite_window_shows_in_the_gauges_and_stays_out_of_the_totals(make_sink, bad):
    sink = make_sink()
    bounds = (0.0, 1.0)
    finite = [np.array([0.5, 2.0]), np.array([-1.0, 0.25, 0.75])]
    poisoned = np.array([0.5, bad, 0.1])  # the recorder's NaN lands in the +Inf bucket
    sink.export(snap(window("loss", finite[0], bounds), step=1))
    sink.export(snap(window("loss", poisoned, bounds), step=2))
    fams = families(scrape(sink))
    assert str(value(fams["loss_avg"], "loss_avg")) == str(poisoned.mean()) == str(bad)
    for gauge, expected in (("loss_min", poisoned.min()), ("loss_max", poisoned.max())):
        assert str(value(fams[gauge], gauge)) == str(expected)  # NaN, inf or -inf as recorded
    assert value(fams["loss"], "loss_count") == 2 and value(fams["loss"], "loss_sum") == 2.5
    assert (
        value(
            fams["rltel_prometheus_nonfinite_windows"], "rltel_prometheus_nonfinite_windows_total"
        )
        == 1
    )
    sink.export(snap(window("loss", finite[1], bounds), step=3))  # the next step is whole
    fams = families(scrape(sink))
    everything = np.concatenate(finite)
    assert value(fams["loss"], "loss_count") == everything.size
    assert value(fams["loss"], "loss_sum") == pytest.approx(everything.sum())
    for bound in (*bounds, math.inf):
        le = "+Inf" if bound == math.inf else repr(bound)
        assert value(fams["loss"], "loss_bucket", le=le) == int((everything <= bound).sum())
    assert value(fams["loss_avg"], "loss_avg") == pytest.approx(finite[1].mean())
    assert value(fams["loss_min"], "loss_min") == -1.0


def test_series_limit_overflow(make_sink):
    sink = make_sink(series_limit=4)
    experts = range(10)
    for step in range(3):
        points = []
        for e in experts:
            attrs = (("layer", 0), ("expert", e))
            points.append(Gauge("moe_balance/load_percent", 10.0 * e + step, attributes=attrs))
            points.append(Counter("moe_balance/tokens", 1000.0 * e * (step + 1), attributes=attrs))
            points.append(
                window("moe_balance/score", np.full(e + 1, float(e)), (1.0,), attributes=attrs)
            )
        sink.export(snap(*points, step=step))
    fams = families(scrape(sink))
    overflow = {**BASE, "otel_metric_overflow": "true"}
    for name, sample in (
        ("moe_balance_load_percent", "moe_balance_load_percent"),
        ("moe_balance_tokens", "moe_balance_tokens_total"),
        ("moe_balance_score", "moe_balance_score_count"),
    ):
        series = [s.labels for s in fams[name].samples if s.name == sample]
        assert len(series) == 5, name  # four regular series plus the overflow one
        assert sum(labels.get("otel_metric_overflow") == "true" for labels in series) == 1
    assert value(fams["moe_balance_load_percent"], "moe_balance_load_percent", **overflow) == 92.0
    # cumulative counters of the overflowed experts are summed in the latest export
    assert value(
        fams["moe_balance_tokens"], "moe_balance_tokens_total", **overflow
    ) == 3 * 1000.0 * sum(range(4, 10))
    # histogram windows of the overflowed experts accumulate
    assert value(fams["moe_balance_score"], "moe_balance_score_count", **overflow) == 3 * sum(
        e + 1 for e in range(4, 10)
    )
    assert value(
        fams["moe_balance_score"], "moe_balance_score_bucket", le="+Inf", **overflow
    ) == 3 * sum(e + 1 for e in range(4, 10))
    assert (
        value(fams["rltel_prometheus_overflow_points"], "rltel_prometheus_overflow_points_total")
        == 3 * 3 * 6
    )
    assert (
        value(fams["rltel_prometheus_metrics_overflowing"], "rltel_prometheus_metrics_overflowing")
        == 3
    )


def test_collisions_resolved_and_counted(make_sink):
    sink = make_sink()
    sink.export(
        snap(
            Gauge("x/total", 1.0),
            Counter("x", 2.0),
            window("loss", np.array([1.0, 3.0])),
            Gauge("loss/count", 7.0),
            Gauge("target/info", 5.0),
        )
    )
    text = scrape(sink)
    fams = families(text)
    assert fams["x"].type == "counter" and value(fams["x"], "x_total") == 2.0
    assert (
        fams["x_total_gauge"].type == "gauge"
        and value(fams["x_total_gauge"], "x_total_gauge") == 1.0
    )
    assert value(fams["loss"], "loss_count") == 2
    assert value(fams["loss_count_gauge"], "loss_count_gauge") == 7.0
    assert value(fams["target_info_gauge"], "target_info_gauge") == 5.0
    assert value(fams["rltel_prometheus_name_collisions"], "rltel_prometheus_name_collisions") == 3
    om = families(scrape(sink, OPENMETRICS), openmetrics=True)  # the strict parser: no clash
    assert om["x"].type == "counter" and om["x_total_gauge"].type == "gauge"


def test_series_expire(make_sink, clock):
    sink = make_sink(expire_seconds=60.0)
    other = (*RESOURCE[:-1], ("host.name", "node1"))
    sink.export(snap(Gauge("a", 1.0), Gauge("b", 2.0, attributes=(("k", "v"),))))
    clock.now += 45
    sink.export(snap(Gauge("a", 3.0), resource=other))
    clock.now += 30  # the first export is 75 s old, the second 30 s
    fams = families(scrape(sink))
    assert "b" not in fams
    assert [s.labels["instance"] for s in fams["a"].samples] == ["node1:rank0"]
    assert [s.labels["instance"] for s in fams["target_info"].samples] == ["node1:rank0"]
    assert (
        value(fams["rltel_prometheus_expired_series"], "rltel_prometheus_expired_series_total") == 2
    )
    clock.now += 61
    fams = families(scrape(sink))
    assert (
        "a" not in fams and value(fams["rltel_prometheus_series"], "rltel_prometheus_series") == 0
    )
    sink.export(snap(Gauge("a", 5.0)))  # an expired metric comes back as a new family
    assert value(families(scrape(sink))["a"], "a") == 5.0


def test_http_endpoints_register_and_errors(make_sink):
    sink = make_sink()
    with urllib.request.urlopen(sink.url.replace("/metrics", "/healthz")) as resp:
        assert resp.status == 200 and resp.read() == b"ok\n"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(sink.url.replace("/metrics", "/nope"))
    assert err.value.code == 404

    class Extra:
        def describe(self):
            return [Metric("rltel_collector_requests", "requests", "counter")]

        def collect(self):
            metric = Metric("rltel_collector_requests", "requests", "counter")
            metric.add_sample("rltel_collector_requests_total", {}, 7.0)
            yield metric

    sink.register(Extra())
    sink.export(snap(Counter("rltel_collector_requests", 1.0)))  # clashes with the extra
    fams = families(scrape(sink, gzip_ok=True))
    assert value(fams["rltel_collector_requests"], "rltel_collector_requests_total") == 7.0
    assert (
        value(fams["rltel_collector_requests_counter"], "rltel_collector_requests_counter_total")
        == 1.0
    )

    class NotAPoint:
        attributes = ()

    bad = Snapshot(points=(NotAPoint(),))  # type: ignore[arg-type]
    assert sink.export(bad) is ExportResult.PERMANENT_FAILURE
    fams = families(scrape(sink))
    assert (
        value(fams["rltel_prometheus_export_errors"], "rltel_prometheus_export_errors_total") == 1
    )
    sink.shutdown()
    sink.shutdown()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(sink.url, timeout=2)


def test_reduce_types_share_the_histogram_shape(make_sink):
    sink = make_sink()
    values = np.array([1.0, 2.0, 6.0])
    reduces = [r for r in StatReduce if r is not StatReduce.SCALAR]  # a scalar is a Gauge
    sink.export(snap(*(window(f"r_{r.value}", values, reduce=r) for r in reduces)))
    fams = families(scrape(sink))
    for r in reduces:
        name = f"r_{r.value}"
        assert fams[name].type == "histogram"
        assert value(fams[name], f"{name}_sum") == 9.0
        assert f"rltel.reduce={r.value}" in fams[name].documentation


def test_fanout_counters_served_next_to_the_metrics(make_sink):
    class Raising(Sink):
        name = "raising"

        def export(self, snapshot, timeout_s=10.0):
            raise RuntimeError("boom")

    sink = make_sink()
    fan = FanOut([sink, Raising()], timeout_s=1.0)
    sink.register(QueueMetrics(fan, "exp_t1"))
    for step in range(5):
        fan.export(snap(Counter("tok", 10.0 * (step + 1)), step=step))
    assert fan.force_flush(2.0) is True  # drained; failures are counted, not flushed
    fams = families(scrape(sink))
    assert value(fams["tok"], "tok_total") == 50.0  # every step reached Prometheus

    def sample(family: str, name: str, sink: str) -> float:
        return value(fams[family], name, run="exp_t1", sink=sink)

    exported, failed = "rltel_collector_sink_exported", "rltel_collector_sink_failed"
    assert sample(exported, f"{exported}_total", "prometheus") == 5
    assert sample(failed, f"{failed}_total", "raising") == 5
    assert sample(failed, f"{failed}_total", "prometheus") == 0
    # a sink whose last export failed is degraded (issue 11); a healthy one is not
    degraded = "rltel_collector_sink_degraded"
    assert sample(degraded, degraded, "raising") == 1
    assert sample(degraded, degraded, "prometheus") == 0
    assert fams["rltel_collector_sink_queue_depth"].samples  # the collector's families
    fan.shutdown(2.0)


def test_counter_overflow_is_the_exact_sum_of_overflowed_totals_and_never_decreases(make_sink):
    """Issue 11: 3000 -> 10 -> 6000 -> 20 (each export's own overflowed points) was wrong."""
    sink = make_sink(series_limit=2)

    def tokens(user: str, total: float) -> Counter:
        return Counter("llm/tokens", total, attributes=(("user", user),))

    def overflow_total() -> float:
        fams = families(scrape(sink))
        return value(fams["llm_tokens"], "llm_tokens_total", otel_metric_overflow="true")

    sink.export(snap(tokens("a", 1.0), tokens("b", 1.0)))  # the two regular series
    seen = []
    exports = [  # (series, cumulative total) per export; a..b regular, the rest overflow
        [("u1", 1000.0), ("u2", 2000.0)],
        [("u3", 10.0)],
        [("u1", 3000.0), ("u2", 3000.0)],
        [("u3", 20.0), ("u4", 0.0)],
        [("u2", 3000.0)],  # unchanged: adds nothing
        [("u1", 5.0)],  # u1 restarted: its new total 5 is new
    ]
    for series in exports:
        sink.export(snap(*(tokens(u, v) for u, v in series)))
        seen.append(overflow_total())
    assert seen == [3000.0, 3010.0, 6010.0, 6020.0, 6020.0, 6025.0]
    assert seen == sorted(seen)


def test_counter_overflow_over_many_series_matches_the_true_total(make_sink):
    sink = make_sink(series_limit=10)
    users = [f"user{i}" for i in range(5000)]
    rng = np.random.default_rng(11)
    totals = dict.fromkeys(users, 0.0)
    previous = 0.0
    for _ in range(4):
        chosen = rng.choice(users, size=2000, replace=False)
        for user in chosen:
            totals[user] += float(rng.integers(1, 9))
        points = [Counter("req", totals[u], attributes=(("user", str(u)),)) for u in chosen]
        sink.export(snap(*points))
        fams = families(scrape(sink))
        regular = sum(
            s.value
            for s in fams["req"].samples
            if s.name == "req_total" and "otel_metric_overflow" not in s.labels
        )
        overflow = value(fams["req"], "req_total", otel_metric_overflow="true")
        assert regular + overflow == sum(totals.values())
        assert overflow >= previous
        previous = overflow


def test_a_busy_port_is_a_config_error_naming_the_key_for_the_sink_and_the_stats_logger():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        expected = re.escape(f"prometheus.port: 127.0.0.1:{port} is in use")
        with pytest.raises(ConfigError, match=f"^{expected}"):
            PrometheusSink(PrometheusConfig(port=port))
        config = {
            "experiment_name": "exp",
            "trial_name": "t1",
            "console": {"enabled": False},
            "prometheus": {"enabled": True, "port": port},
        }
        with pytest.raises(ConfigError, match=f"^stats_logger.{expected}.*0 for any free port"):
            StatsLogger(config)


def test_an_address_that_is_not_local_names_the_host_key():
    config = PrometheusConfig(host="192.0.2.1", port=0)  # TEST-NET-1: never a local address
    with pytest.raises(ConfigError) as caught:
        PrometheusSink(config)
    assert str(caught.value) == (
        "prometheus.host: 192.0.2.1 is not an address of this machine "
        "(Cannot assign requested address)"
    )


def test_instances_say_rank_or_role_and_worker_id():
    from exporters.prometheus.labels import instance

    host = {"host.name": "vm"}
    assert instance({**host, "rltel.rank": 0}) == "vm:rank0"
    rollout = {**host, "rltel.role": "rollout", "rltel.worker_id": "0"}
    assert instance(rollout) == "vm:rollout0"
    assert instance({**rollout, "rltel.role": "eval"}) == "vm:eval0"  # not the same instance
    assert instance({**host, "service.instance.id": "pod-7", "rltel.rank": 3}) == "pod-7"
