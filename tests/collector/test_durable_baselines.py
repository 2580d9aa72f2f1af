"""The decoder's per-series baselines kept in the durable state (collector.baselines).

A decoder that is replaced by a new one on the same directory (after a kill: nothing closed;
or after a clean close) turns the senders' next requests into the same windows and totals as
one decoder that saw every request: cumulative scalar streams (rltel's rollout workers),
cumulative histograms with buckets and delta sums (other OTel senders), counters.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from collector import baselines
from collector.baselines import Baselines
from collector.durable import DurableState
from collector.signal_journal import request_journal
from telemetry.model.snapshot import StatReduce
from telemetry.otlp.decode import Decoder
from telemetry.otlp.temporality import SumState
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


def _state_seq(directory) -> int:
    return json.loads((directory / "state.json").read_text())["seq"]


def _kill_between_state_and_ack(directory) -> None:
    """Every later ack of the log fails (as a kill after ``state.json``'s rename would leave
    it): ``acked`` is a directory."""
    (directory / "acked").unlink(missing_ok=True)
    (directory / "acked").mkdir()


@pytest.mark.parametrize("after", [0, 1], ids=["killed-at-the-fold", "one-request-later"])
def test_log_records_the_state_holds_are_not_replayed_over_it(tmp_path, monkeypatch, after):
    reference = Decoder(started_ns=START + 1)
    want = [decoded(reference, i) for i in range(REQUESTS)]
    monkeypatch.setattr(baselines, "COMPACT_BYTES", 1 << 30)
    first = Decoder(started_ns=START + 1)
    Baselines(tmp_path, first, fsync=False)
    _kill_between_state_and_ack(tmp_path)
    got = [decoded(first, i) for i in range(2)]
    monkeypatch.setattr(baselines, "COMPACT_BYTES", 1)  # the third request folds the log
    got.append(decoded(first, 2))
    assert _state_seq(tmp_path) == 2
    monkeypatch.setattr(baselines, "COMPACT_BYTES", 1 << 30)
    got += [decoded(first, i) for i in range(3, 3 + after)]
    (tmp_path / "acked").rmdir()  # killed: the log still holds records 0 to 2
    second = Decoder()
    Baselines(tmp_path, second, fsync=False)
    got += [decoded(second, i) for i in range(3 + after, REQUESTS)]
    assert got == want


@pytest.mark.parametrize("damage", ["missing", "unreadable"])
def test_without_a_readable_state_the_whole_log_is_taken_up(tmp_path, damage):
    reference = Decoder(started_ns=START + 1)
    want = [decoded(reference, i) for i in range(REQUESTS)]
    first = Decoder(started_ns=START + 1)
    Baselines(tmp_path, first, fsync=False)
    got = [decoded(first, 0)]  # its record is the log's first (seq 0); killed
    if damage == "missing":
        (tmp_path / "state.json").unlink()
    else:
        (tmp_path / "state.json").write_text("{not json")
    second = Decoder(started_ns=START + 5)
    assert len(Baselines(tmp_path, second, fsync=False)) == 3
    assert second.started_ns == START + 5  # no kept start: its own
    got += [decoded(second, i) for i in range(1, REQUESTS)]
    assert got == want


def test_a_state_that_cannot_be_written_leaves_every_record_in_the_log(tmp_path, caplog):
    (tmp_path / "state.json.tmp").mkdir()  # every write of the state fails
    reference = Decoder(started_ns=START + 1)
    want = [decoded(reference, i) for i in range(REQUESTS)]
    first = Decoder(started_ns=START + 1)
    store = Baselines(tmp_path, first, fsync=False)
    got = [decoded(first, i) for i in range(3)]
    store.close()
    assert "cannot write state.json" in caplog.text
    (tmp_path / "state.json.tmp").rmdir()
    second = Decoder()
    assert len(Baselines(tmp_path, second, fsync=False)) == 3
    got += [decoded(second, i) for i in range(3, REQUESTS)]
    assert got == want


def test_taking_up_series_is_logged_only_when_there_are_some(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="collector.baselines")

    def taken_up() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if "taken up" in r.getMessage()]
        caplog.clear()
        return lines

    first = Decoder(started_ns=START + 1)
    Baselines(tmp_path, first, fsync=False)
    assert taken_up() == []  # nothing there
    decoded(first, 0)  # killed: the series are in the log only
    store = Baselines(tmp_path, Decoder(), fsync=False)
    assert taken_up() == [f"baselines {tmp_path}: 3 series taken up"]
    store.close()  # now in the state only
    store = Baselines(tmp_path, Decoder(), fsync=False)
    assert taken_up() == [f"baselines {tmp_path}: 3 series taken up"]

    empty = tmp_path / "empty"
    log = request_journal(empty, 1 << 20, False)
    log.append(b"not json")  # a log of one unreadable record: taken up, nothing in it
    log.close()
    Baselines(empty, Decoder(), fsync=False)
    assert taken_up() == [f"baselines {empty}: 0 series taken up"]


def test_closing_a_store_of_no_series_twice_removes_its_directory_once(tmp_path):
    store = Baselines(tmp_path / "baselines", Decoder(), fsync=False)
    store.close()
    assert not (tmp_path / "baselines").exists()
    store.close()


def test_unreadable_log_records_are_logged_and_skipped(tmp_path, caplog):
    log = request_journal(tmp_path, 1 << 20, False)
    good = baselines.to_json([(_key("a"), SumState(START, 2.0))])
    for record in (
        b"not json",  # ValueError
        b"[1]",  # TypeError
        json.dumps([[[], [["counter", "b", [], "q", START, 1.0]]]]).encode(),  # form < "s"
        json.dumps([[[], [["counter", "c", [], "z", START, 1.0]]]]).encode(),  # form > "s"
        json.dumps([[[], [["counter", "d", [], "a", START, 1, 1.0, 0, 1, [], [1]]]]]).encode(),
        json.dumps(good).encode(),
    ):
        log.append(record)
    log.close()
    decoder = Decoder()
    assert len(Baselines(tmp_path, decoder, fsync=False)) == 1
    assert decoder.export_state()[1] == [(_key("a"), SumState(START, 2.0))]
    assert [r.getMessage().split(": ")[1] for r in caplog.records] == [
        f"record {seq} unreadable" for seq in range(5)
    ]


def test_a_state_of_this_format_version_is_read_and_of_another_refused(tmp_path, caplog):
    series = baselines.to_json([(_key("a"), SumState(START, 2.0))])
    state = {"version": 1, "started_ns": START, "seq": -1, "series": series}
    (tmp_path / "state.json").write_text(json.dumps(state))  # as every release writes it
    assert len(Baselines(tmp_path, Decoder(), fsync=False)) == 1
    for version in (0, 2):
        (tmp_path / "state.json").write_text(json.dumps({**state, "version": version}))
        assert len(Baselines(tmp_path, Decoder(), fsync=False)) == 0
        assert f"version {version}, not 1" in caplog.text


@pytest.mark.parametrize("fsync", [False, True])
def test_the_state_is_fsynced_only_with_fsync(tmp_path, monkeypatch, fsync):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    Baselines(tmp_path, Decoder(), fsync=fsync)
    assert bool(synced) is fsync


def _key(pad: str) -> tuple:
    return ("counter", RESOURCE, "big", (("pad", pad),))


def _change(size: int, total: float) -> dict:
    """One series' change whose log record is ``size`` bytes with a total of 10.0 (one
    byte less with 1.0), the same series for every ``size``."""
    base = len(json.dumps(baselines.to_json([(_key(""), SumState(START, 10.0))])))
    return {_key("x" * (size - base)): SumState(START, total)}


def test_the_log_folds_into_the_state_at_compact_bytes_or_twice_the_state(tmp_path, monkeypatch):
    assert baselines.COMPACT_BYTES == 1 << 20  # as documented
    quarter = (1 << 20) // 4
    store = Baselines(tmp_path, Decoder(), fsync=False)
    fresh = _state_seq(tmp_path)
    for total in (10.0, 10.0, 10.0, 1.0):  # one byte short of COMPACT_BYTES
        store.record(_change(quarter, total))
    assert _state_seq(tmp_path) == fresh
    store.record(_change(quarter, 10.0))  # past it
    assert _state_seq(tmp_path) == 4
    for _ in range(3):
        store.record(_change(quarter, 10.0))
        assert _state_seq(tmp_path) == 4
    store.record(_change(quarter, 10.0))  # COMPACT_BYTES exactly
    assert _state_seq(tmp_path) == 8

    state_bytes = (tmp_path / "state.json").stat().st_size
    assert 2 * state_bytes < 1 << 20
    monkeypatch.setattr(baselines, "COMPACT_BYTES", 1)  # now twice the state bounds the log
    for _ in range(2):  # above the state's size, below twice it
        store.record(_change(quarter, 10.0))
    assert 2 * quarter > state_bytes + 2 and _state_seq(tmp_path) == 8
    store.record(_change(quarter, 10.0))  # past twice the state
    assert 3 * quarter < 3 * state_bytes and _state_seq(tmp_path) == 11
