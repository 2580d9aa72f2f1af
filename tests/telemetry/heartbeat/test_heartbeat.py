"""The heartbeat in one process: beats, the store board, the families, failures, exit."""

from __future__ import annotations

import logging
import threading
import urllib.request
from datetime import timedelta

import pytest
import torch.distributed as dist
from prometheus_client import CollectorRegistry, generate_latest

from rltel import StatsLogger
from telemetry import stats_tracker
from telemetry.heartbeat import Beat, BeatGroup, Heartbeat, HeartbeatCollector, StoreBoard
from telemetry.heartbeat.board import LocalBoard
from tests.distributed import free_port

BASE = {"console": {"enabled": False}, "heartbeat": {"interval_s": 0.05}}


def _wait(condition, what: str, timeout_s: float = 30.0) -> None:
    done = threading.Event()
    while not condition():
        assert not done.wait(0.02) and (timeout_s := timeout_s - 0.02) > 0, what


def test_beat_round_trips_and_rejects_foreign_bytes():
    beat = Beat(3, "n1", 7, "ppo_actor/update", 1.5, 2.5, 0.25, 3.0, False)
    assert Beat.decode(beat.encode()) == beat
    with pytest.raises(ValueError, match="not a heartbeat"):
        Beat.decode(b'{"rank": 1}')


def test_a_store_board_carries_every_rank_and_skips_missing_ones():
    store = dist.TCPStore("127.0.0.1", free_port(), is_master=True, timeout=timedelta(seconds=5))
    writer, reader = StoreBoard(store, 3, "trainer", 5.0), StoreBoard(store, 3, "trainer", 5.0)
    assert reader.read() == []
    beats = [Beat(r, "h", r, "", 0.0, 0.0, 0.0, 0.0) for r in (0, 2)]
    for beat in beats:
        writer.publish(beat)
    assert reader.read() == beats  # rank 1 never published
    writer.publish(Beat(1, "h", 1, "gen", 0.0, 0.0, 0.0, 0.0, True))
    assert [(b.rank, b.exited) for b in reader.read()] == [(0, False), (1, True), (2, False)]
    assert StoreBoard(store, 3, "rollout", 5.0).read() == []  # roles keep apart


def test_progress_phase_and_median_reach_the_endpoint():
    logger = StatsLogger({**BASE, "prometheus": {"enabled": True, "port": 0}})
    try:
        for step in range(3):
            logger.commit(0, step, step, {"x": 1.0})
        with stats_tracker.record_timing("generate"):
            _wait(lambda: logger.heartbeat.beats()[0].phase == "generate", "no beat in phase")
            text = urllib.request.urlopen(logger.prometheus_url, timeout=10).read().decode()
    finally:
        logger.close()
    assert 'rltel_heartbeat_step{experiment="default",host=' in text
    assert 'phase="generate",rank="0"' in text and 'role="trainer"' in text
    assert "rltel_heartbeat_stall_floor_seconds" in text
    (beat,) = logger.heartbeat.beats()
    assert beat.step == 2 and beat.median_step_s > 0


def test_collector_labels_a_rank_outside_every_phase():
    beat = Beat(1, "n9", 4, "", 10.0, 9.0, 2.0, 11.0, True)
    registry = CollectorRegistry()
    registry.register(HeartbeatCollector(lambda: [BeatGroup(("e", "t", "trainer"), 60.0, (beat,))]))
    text = generate_latest(registry).decode()
    labels = 'experiment="e",host="n9",phase="(none)",rank="1",role="trainer",trial="t"'
    assert f"rltel_heartbeat_phase_start_timestamp_seconds{{{labels}}} 10.0" in text
    assert 'rltel_heartbeat_exited{experiment="e",host="n9",rank="1"' in text
    assert (
        'rltel_heartbeat_stall_floor_seconds{experiment="e",role="trainer",trial="t"} 60.0' in text
    )


class _Failing(LocalBoard):
    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def publish(self, beat: Beat) -> None:
        if self.down:
            raise ConnectionError("store unreachable")
        super().publish(beat)


def test_a_failing_store_logs_once_per_change_and_raises_nothing(caplog):
    board = _Failing()
    caplog.set_level(logging.WARNING, logger="telemetry.heartbeat.thread")
    heartbeat = Heartbeat(board, 0, "h", 0.01, reader=False)
    try:
        _wait(lambda: heartbeat.failures >= 5, "the failing store was not retried")
        board.down = False
        _wait(lambda: board.read(), "no beat after the store came back")
    finally:
        heartbeat.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "store unreachable" in lines[0] and "back after" in lines[1]
    assert board.read()[0].exited


def test_close_says_exited_and_is_safe_twice():
    board = LocalBoard()
    heartbeat = Heartbeat(board, 0, "h", 60.0, reader=False)
    heartbeat.close()
    heartbeat.close()
    assert board.read()[0].exited


def test_disabled_starts_no_thread():
    logger = StatsLogger({**BASE, "heartbeat": {"enabled": False}})
    assert logger.heartbeat is None
    logger.close()


def test_the_board_logs_the_store_address_it_joined_once(caplog):
    caplog.set_level(logging.INFO, logger="telemetry.heartbeat.board")
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=5))
    board = StoreBoard(dist.PrefixStore("default_pg", server), 2, "trainer", 5.0)  # as a group's
    board.publish(Beat(0, "h", 0, "", 0.0, 0.0, 0.0, 0.0))
    board.read()
    StoreBoard(dist.HashStore(), 1, "rollout", 5.0).read()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert lines == [
        f"heartbeat: trainer beats on the store at 127.0.0.1:{port}",
        "heartbeat: rollout beats on the store at a HashStore",
    ]
