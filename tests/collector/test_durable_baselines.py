"""The decoder's per-series baselines kept in the durable state (collector.baselines).

A decoder that is replaced by a new one on the same directory (after a kill: nothing closed;
or after a clean close) turns the senders' next requests into the same windows and totals as
one decoder that saw every request: cumulative scalar streams (rltel's rollout workers),
cumulative histograms with buckets and delta sums (other OTel senders), counters.
"""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from collector import baselines
from collector.baselines import Baselines
from collector.durable import DurableState
from telemetry.model.snapshot import StatReduce
from telemetry.otlp.decode import Decoder
from telemetry.otlp.wire import description

CUMULATIVE, DELTA = 2, 1
START = 1_000  # the senders' start (epoch ns): before every decoder's
RESOURCE = (("rltel.experiment", "e"), ("rltel.role", "rollout"), ("rltel.worker_id", "w0"))


def _kv(key: str, value: str | int) -> KeyValue:
    any_value = (
        AnyValue(string_value=value) if isinstance(value, str) else AnyValue(int_value=value)
    )
    return KeyValue(key=key, value=any_value)


def request(i: int) -> ExportMetricsServiceRequest:
    """The sender's ``i``-th request: running totals after ``i + 1`` windows."""
    n = i + 1
    scalar = pb.Metric(name="rollout/reward", description=description(StatReduce.SCALAR))
    scalar.histogram.aggregation_temporality = CUMULATIVE
    scalar.histogram.data_points.add(
        start_time_unix_nano=START, time_unix_nano=10_000 + i, count=3 * n, sum=1.5 * n * n
    )
    latency = pb.Metric(name="latency", unit="s")
    latency.histogram.aggregation_temporality = CUMULATIVE
    point = latency.histogram.data_points.add(
        start_time_unix_nano=START, time_unix_nano=10_000 + i, count=4 * n, sum=2.0 * n
    )
    point.explicit_bounds.extend([0.1, 1.0])
    point.bucket_counts.extend([n, 2 * n, n])
    point.attributes.append(_kv("route", "gen"))
    point.min, point.max = 0.01, 0.5 + n
    tokens = pb.Metric(name="tokens")
    tokens.sum.aggregation_temporality = DELTA
    tokens.sum.is_monotonic = True
    tokens.sum.data_points.add(start_time_unix_nano=START, time_unix_nano=10_000 + i, as_int=7 + i)
    out = ExportMetricsServiceRequest()
    rm = out.resource_metrics.add()
    rm.resource.attributes.extend(_kv(k, v) for k, v in RESOURCE)
    rm.scope_metrics.add().metrics.extend([scalar, latency, tokens])
    return out


def decoded(decoder: Decoder, i: int) -> tuple:
    (snapshot,) = decoder.decode(request(i)).snapshots
    return snapshot.points


REQUESTS = 6


@pytest.mark.parametrize("clean", [False, True], ids=["killed", "closed"])
@pytest.mark.parametrize("cut", [1, 4])
def test_a_new_decoder_on_the_kept_baselines_goes_on_as_one_that_saw_everything(
    tmp_path, monkeypatch, clean, cut
):
    monkeypatch.setattr(baselines, "COMPACT_BYTES", 600)  # fold the log a few times
    reference = Decoder(started_ns=START + 1)
    want = [decoded(reference, i) for i in range(REQUESTS)]
    assert {p.metric for p in want[1]} == {"rollout/reward", "latency", "tokens"}

    first = Decoder(started_ns=START + 1)
    store = Baselines(tmp_path, first, fsync=False)
    got = [decoded(first, i) for i in range(cut)]
    if clean:
        store.close()
        assert json.loads((tmp_path / "state.json").read_text())["series"]
        assert not list(tmp_path.glob("*.seg"))  # the log folded into the state
    second = Decoder()  # a later process: a later start
    again = Baselines(tmp_path, second, fsync=False)
    assert len(again) == 3 and second.started_ns == START + 1  # the first process's start
    got += [decoded(second, i) for i in range(cut, REQUESTS)]
    assert got == want  # nothing lost, nothing twice

    control = Decoder()  # the same restart without the kept state: the windows are lost
    (tokens,) = decoded(control, cut)
    assert tokens.value == 7 + cut < want[cut][-1].value  # and the total started anew


def test_a_series_that_started_after_the_first_process_is_whole_at_its_first_point(tmp_path):
    first = Decoder(started_ns=START - 1)
    Baselines(tmp_path, first, fsync=False)  # nothing seen yet; killed
    second = Decoder()
    Baselines(tmp_path, second, fsync=False)
    scalar = next(p for p in decoded(second, 2) if p.metric == "rollout/reward")
    assert (scalar.count, scalar.value) == (9, 1.5)  # its first request: whole


def test_restored_series_keep_the_new_limits_and_a_damaged_state_starts_anew(tmp_path, caplog):
    first = Decoder(started_ns=START + 1)
    store = Baselines(tmp_path, first, fsync=False)
    decoded(first, 0)
    store.close()
    small = Decoder(max_series_per_metric=2, max_series_total=2)
    assert len(Baselines(tmp_path, small, fsync=False)) == 2  # of 3
    assert "1 series past the series limits left out" in caplog.text

    (tmp_path / "state.json").write_text("{not json")
    fresh = Decoder()
    assert len(Baselines(tmp_path, fresh, fsync=False)) == 0
    assert "state.json unreadable, series start anew" in caplog.text


def test_the_durable_state_keeps_the_baselines_dir_only_while_it_holds_a_series(tmp_path):
    state = DurableState(tmp_path / "state", 1 << 20, False, "collector.durable.directory")
    decoder = Decoder(started_ns=START + 1)
    state.attach_decoder(decoder)
    decoder.decode(request(0))
    state.sync()
    state.close()
    assert (tmp_path / "state" / "baselines" / "state.json").exists()
    assert not (tmp_path / "state" / "lock").exists()

    state = DurableState(tmp_path / "state", 1 << 20, False, "collector.durable.directory")
    state.attach_decoder(Decoder())  # takes the 3 series up: they stay at its close
    state.close()
    assert (tmp_path / "state" / "baselines" / "state.json").exists()

    empty = DurableState(tmp_path / "empty", 1 << 20, False, "collector.durable.directory")
    empty.attach_decoder(Decoder())
    empty.close()
    assert not (tmp_path / "empty").exists()  # nothing kept: the directory goes
