"""The heartbeat's wire form and the collector's board: every field round-trips, the latest
beat per rank replaces the last, a closed reader forgets its run, limits are counted, and a
collector that is down costs the sender one log line."""

from __future__ import annotations

import logging

import pytest

from collector.heartbeats import HeartbeatBoard
from exporters.otlp.heartbeat import OtlpBeats
from telemetry.config import StatsLoggerConfig
from telemetry.heartbeat import Beat, BeatGroup
from telemetry.heartbeat.wire import group_of, snapshot_of
from telemetry.model.snapshot import Snapshot
from tests.distributed import free_port

RUN = ("e", "t", "trainer")


def beat(rank: int, phase: str, sent: float, step: int = 3, exited: bool = False) -> Beat:
    return Beat(rank, f"n{rank}", step, phase, 100.0 + rank, 90.0, 2.5, sent, exited)


def sender(endpoint: str) -> OtlpBeats:
    config = StatsLoggerConfig(otlp={"endpoint": endpoint}, heartbeat={"interval_s": 5.0})
    return OtlpBeats(config)


def test_the_wire_form_round_trips_every_field():
    group = BeatGroup(RUN, 60.0, (beat(0, "", 1.0), beat(7, "gen", 2.0, exited=True)))
    assert group_of(snapshot_of(group)) == (group, False)
    assert group_of(snapshot_of(group, closed=True)) == (group, True)
    torn = Snapshot(snapshot_of(group).points[:-1], resource=snapshot_of(group).resource)
    with pytest.raises(ValueError, match="rank '7': missing exited"):
        group_of(torn)


def test_a_beat_replaces_its_rank_and_a_closed_reader_forgets_the_run():
    board = HeartbeatBoard(max_runs=4, max_ranks=4)
    board.take([snapshot_of(BeatGroup(RUN, 30.0, (beat(0, "gen", 10.0), beat(1, "up", 10.0))))])
    board.take([snapshot_of(BeatGroup(RUN, 30.0, (beat(1, "", 12.0, step=4),)))])
    board.take([snapshot_of(BeatGroup(RUN, 30.0, (beat(1, "old", 11.0),)))])  # older: ignored
    (group,) = board.groups()
    assert [(b.rank, b.phase, b.step) for b in group.beats] == [
        (0, "gen", 3),
        (1, "", 4),
    ]
    closing = BeatGroup(RUN, 30.0, (beat(0, "", 13.0, exited=True),))
    assert board.take([snapshot_of(closing, closed=True)]) == 1
    assert board.groups() == []


def test_a_broken_heartbeat_is_dropped_and_counted():
    board = HeartbeatBoard(max_runs=4, max_ranks=4)
    whole = snapshot_of(BeatGroup(RUN, 30.0, (beat(0, "", 1.0),)))
    torn = Snapshot(whole.points[:-1], resource=whole.resource)
    assert board.take([torn]) == 0
    assert board.dropped == len(torn.points) and board.groups() == []


def test_runs_and_ranks_beyond_the_limits_are_dropped_and_counted():
    board = HeartbeatBoard(max_runs=1, max_ranks=2)
    beats = tuple(beat(rank, "", 1.0) for rank in range(3))
    assert board.take([snapshot_of(BeatGroup(RUN, 5.0, beats))]) == 2
    assert board.take([snapshot_of(BeatGroup(("e", "u", "trainer"), 5.0, beats))]) == 0
    assert board.dropped == 4
    (group,) = board.groups()
    assert [b.rank for b in group.beats] == [0, 1]


def test_a_collector_down_costs_one_info_line_and_raises_nothing(caplog):
    caplog.set_level(logging.INFO)
    send = sender(f"127.0.0.1:{free_port()}")
    for sent in range(4):
        send(BeatGroup(RUN, 5.0, (beat(0, "", float(sent)),)), sent == 3)
    lines = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "exporters.otlp.heartbeat"
    ]
    assert len(lines) == 1, lines  # the OTLP sink warns of the outage: one INFO line here
    assert lines[0][0] == logging.INFO and "(UNAVAILABLE)" in lines[0][1]
    assert (send.sent, send.failures) == (0, 4)
