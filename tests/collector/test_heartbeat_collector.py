"""The heartbeat in collector mode: beats served per rank over real gRPC, and a stuck rank
named through a real ``rltel collector``.

Served: a rank's newer beat replaces its series (a phase change leaves no old phase behind),
with the embedded endpoint's labels (no job/instance of the collector's series store), never
in the step path; a closed reader takes its run's beats away; a request mixing heartbeats
and data has each go its own way; a trainer's rank 0 sends beats, a rollout worker its
own under its worker id.

The stuck rank: the job of :mod:`tests.telemetry.heartbeat.stuck` (3 gloo ranks, rank 2
blocked inside ``ppo_actor/update``) logs over OTLP to a collector process; rank 0's
heartbeat thread reads every rank's beat from the job's store and sends them to the
collector at each beat (1 s), while rank 0's training thread waits at the collective. A real
Prometheus scrapes the collector's ``/metrics`` and evaluates the shipped ``RLRankStuck``
rule; a real Alertmanager posts it. After the clean exit the collector serves no beat of the
run, and the run's TensorBoard files (the bridged step logs) hold the steps and no heartbeat.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.parse

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub

from rltel.logger import StatsLogger
from telemetry.heartbeat import BeatGroup
from telemetry.heartbeat.wire import snapshot_of
from telemetry.model.snapshot import Gauge, Snapshot
from telemetry.otlp.encode import encode
from tests.collector.conftest import samples, scrape
from tests.collector.test_heartbeat_board import RUN, beat, sender
from tests.collector.test_integration import CollectorProcess, read_tensorboard
from tests.telemetry.heartbeat.stuck import PHASE, STEPS, stuck_job


def test_beats_replace_their_rank_and_a_closed_reader_takes_them_away(start_collector):
    server = start_collector()
    send = sender(server.endpoint)
    send(BeatGroup(RUN, 30.0, (beat(0, "gen", 10.0), beat(1, "update", 10.0))), False)
    send(BeatGroup(RUN, 30.0, (beat(1, "", 12.0, step=4),)), False)
    send(BeatGroup(RUN, 30.0, (beat(1, "old", 11.0),)), False)  # older: ignored
    got = scrape(server.metrics_url)
    phases = samples(got, "rltel_heartbeat_phase_start_timestamp_seconds")
    assert sorted(dict(labels)["phase"] for labels in phases) == ["(none)", "gen"]
    step = samples(got, "rltel_heartbeat_step", rank=1, host="n1", experiment="e", trial="t")
    assert list(step.values()) == [4.0]
    assert not [key for key in step for name, _ in key if name in ("job", "instance")]
    assert samples(got, "rltel_heartbeat_stall_floor_seconds", role="trainer")
    assert samples(got, "rltel_collector_heartbeats_dropped_total") == {(): 0.0}
    assert server.pipeline.stats().snapshots == 0  # never in the step path
    send(BeatGroup(RUN, 30.0, (beat(0, "", 13.0, exited=True),)), True)
    got = scrape(server.metrics_url)
    assert not [name for name, _ in got if name.startswith("rltel_heartbeat_")]


def test_a_heartbeat_beside_data_is_held_apart(start_collector):
    server = start_collector()
    beats = snapshot_of(BeatGroup(RUN, 30.0, (beat(0, "gen", 1.0),)))
    data = Snapshot((Gauge("train/x", 2.0),), resource=beats.resource[:3])
    request = encode_metrics(encode(beats)[0])
    request.resource_metrics.extend(encode_metrics(encode(data)[0]).resource_metrics)
    MetricsServiceStub(grpc.insecure_channel(server.endpoint)).Export(request, timeout=10)
    assert server.pipeline.force_flush(10)
    got = scrape(server.metrics_url)
    assert list(samples(got, "train_x", experiment="e", trial="t").values()) == [2.0]
    assert list(samples(got, "rltel_heartbeat_step", rank=0, experiment="e").values()) == [3.0]
    assert server.pipeline.stats().snapshots == 1  # the data's; the beats held apart


def test_a_trainers_beats_and_a_rollout_workers_reach_the_collector_apart(
    start_collector, tmp_path
):
    server = start_collector()
    config = {
        "experiment_name": "e",
        "trial_name": "t",
        "fileroot": str(tmp_path),
        "console": {"enabled": False},
        "otlp": {"endpoint": server.endpoint},
        "heartbeat": {"interval_s": 0.05},
    }
    trainer = StatsLogger(config)
    rollout = StatsLogger(config, role="rollout", worker_id=1)  # rank 0 of its own process
    board = server.pipeline.heartbeats
    try:
        sent: set[float] = set()
        waited = threading.Event()
        deadline = time.monotonic() + 60
        while len(sent) < 10:  # ten beats, each held under its own reader
            sent |= {b.sent for group in board.groups() for b in group.beats}
            assert not waited.wait(0.02) and time.monotonic() < deadline, "no beats"
        readers = sorted((group.run[2], group.worker) for group in board.groups())
        assert readers == [("rollout", "1"), ("trainer", "")]
    finally:
        rollout.close()
        trainer.close()
    assert board.groups() == []  # the trainer's rank 0 and the worker closed


@pytest.mark.timeout(300)
def test_a_stuck_rank_is_named_through_the_collector(tmp_path):
    collector = CollectorProcess(tmp_path, {"tensorboard": {"path": str(tmp_path / "tb")}})
    try:
        sink = {
            "otlp": {"endpoint": collector.endpoint},
            "fileroot": str(tmp_path / "trainer"),
            "heartbeat": {"interval_s": 1.0, "stall_floor_s": 6.0},
        }
        target = urllib.parse.urlsplit(collector.metrics_url).netloc
        _, ranks = stuck_job(tmp_path, target, sink)
        assert ranks[0] == [(0, True), (1, True), (2, True)]
        # the reader closed: the run's beats are gone from the collector, nothing can fire
        served = [name for name, _ in scrape(collector.metrics_url)]
        assert "rltel_heartbeat_stall_floor_seconds" not in served
        assert not [name for name in served if name.startswith("rltel_heartbeat_")]
    finally:
        assert collector.stop(signal.SIGTERM) == 0, "".join(collector.lines)
    events = read_tensorboard(tmp_path / "tb" / "hb" / "stuck")
    tags = events.Tags()["scalars"]
    assert not [tag for tag in tags if "heartbeat" in tag], tags
    assert [e.step for e in events.Scalars(f"timeperf/{PHASE}")] == list(range(STEPS))
