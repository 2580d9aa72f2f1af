"""Rollout and eval workers beat to the collector too, each under its worker id.

Board: two workers of one run are held apart (``worker`` label, not both under rank 0), and
a worker that closes takes only its own beats away, the trainer's ranks' and the other
worker's stay.

End to end: a trainer and two rollout workers, each its own process, log over OTLP to a
real ``rltel collector`` (heartbeat every 1 s). Worker ``w1`` then blocks inside
``record_timing("rollout/generate")`` while ``w0`` and the trainer go on committing. A real
Prometheus scrapes the collector and evaluates the shipped ``RLRankStuck`` expression (every
second, no ``for``); a real Alertmanager posts to a webhook: the one alert names ``w1``, its
host and phase, and no alert of the healthy worker or the trainer ever fires. Then every
process closes cleanly: the collector serves no beat of theirs and the alert resolves.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from collector.heartbeats import HeartbeatBoard
from dashboards.webhook import WebhookReceiver
from telemetry.heartbeat import BeatGroup
from telemetry.heartbeat.wire import snapshot_of
from tests.collector.conftest import samples, scrape
from tests.collector.test_heartbeat_board import beat
from tests.collector.test_integration import CollectorProcess
from tests.collector.test_remote_write_e2e import wait_for
from tests.dashboards import servers
from tests.telemetry.heartbeat.stuck import _rules

REPO = Path(__file__).resolve().parents[2]
STUCK, PHASE, STUCK_AT = "w1", "rollout/generate", 5
FLOOR_S = 8.0
"""The stall floor: the healthy processes' beats (1 s) and scrapes (1 s) stay well within it."""


def test_workers_are_held_apart_and_a_closing_worker_takes_only_its_own_beats():
    board = HeartbeatBoard(max_runs=4, max_ranks=8)
    trainer = BeatGroup(("e", "t", "trainer"), 30.0, (beat(0, "up", 1.0), beat(1, "up", 1.0)))
    w0 = BeatGroup(("e", "t", "rollout"), 30.0, (beat(0, "gen", 1.0),), "w0")
    w1 = BeatGroup(("e", "t", "rollout"), 30.0, (beat(0, "gen", 2.0),), "w1")
    board.take([snapshot_of(group) for group in (trainer, w0, w1)])
    assert board.groups() == [trainer, w0, w1]
    families = {family.name: family for family in board.collect()}
    steps = [s.labels for s in families["rltel_heartbeat_step"].samples]
    assert sorted((s["role"], s.get("worker", ""), s["rank"]) for s in steps) == [
        ("rollout", "w0", "0"),
        ("rollout", "w1", "0"),
        ("trainer", "", "0"),
        ("trainer", "", "1"),
    ]
    assert len(families["rltel_heartbeat_stall_floor_seconds"].samples) == 2  # one per run
    closing = BeatGroup(w1.run, 30.0, (beat(0, "", 3.0, exited=True),), "w1")
    board.take([snapshot_of(closing, closed=True)])
    assert board.groups() == [trainer, w0]


def _process(role: str, worker: str, endpoint: str, marks: str) -> None:
    """One logger process: commits every 0.1 s until ``marks/stop``; worker ``STUCK``
    blocks inside ``PHASE`` at step ``STUCK_AT`` until ``marks/release``."""
    from rltel.logger import StatsLogger
    from telemetry import stats_tracker

    config = {
        "experiment_name": "hb",
        "trial_name": "workers",
        "fileroot": str(Path(marks, role, worker)),
        "console": {"enabled": False},
        "otlp": {"endpoint": endpoint},
        "heartbeat": {"interval_s": 1.0, "stall_floor_s": FLOOR_S},
    }
    logger = StatsLogger(config, role=role, worker_id=worker or None)
    stop, release = Path(marks, "stop"), Path(marks, "release")
    step = 0
    while not stop.exists():
        with stats_tracker.record_timing(PHASE if role == "rollout" else "ppo_actor/update"):
            time.sleep(0.1)
            if worker == STUCK and step == STUCK_AT:
                Path(marks, "stopped").write_text(repr(time.time()))
                deadline = time.monotonic() + 150
                while not release.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)  # stuck until the test has its alert
        logger.commit(0, step, step, stats_tracker.export_all())
        step += 1
    logger.close()


def _start(role: str, worker: str, endpoint: str, marks: Path) -> subprocess.Popen:
    code = (
        "from tests.collector.test_heartbeat_workers import _process; "
        f"_process({role!r}, {worker!r}, {endpoint!r}, {str(marks)!r})"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("WANDB_SERVICE", None)
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env)


@pytest.mark.timeout(300)
def test_a_stuck_rollout_worker_is_named_and_the_others_raise_nothing(tmp_path):
    collector = CollectorProcess(tmp_path, {})
    marks = tmp_path / "marks"
    marks.mkdir()
    hook = WebhookReceiver(out=None, clock=time.time)
    target = urllib.parse.urlsplit(collector.metrics_url).netloc
    procs: list[subprocess.Popen] = []
    try:
        with (
            servers.alertmanager(tmp_path, hook.url) as alertmanager,
            servers.prometheus(
                tmp_path, servers.prometheus_config(target, alertmanager, _rules(tmp_path), True)
            ) as prometheus,
        ):
            for role, worker in (("trainer", ""), ("rollout", "w0"), ("rollout", STUCK)):
                procs.append(_start(role, worker, collector.endpoint, marks))
            try:
                deadline = time.monotonic() + 200
                while not hook.notifications():
                    assert all(p.poll() is None for p in procs), [p.poll() for p in procs]
                    assert time.monotonic() < deadline, "no RLRankStuck notification"
                    time.sleep(0.2)
            finally:
                (marks / "release").write_text("go")
                (marks / "stop").write_text("go")
                codes = [p.wait(120) for p in procs]
            assert codes == [0, 0, 0]
            first = hook.notifications()[0]
            assert first.received - float((marks / "stopped").read_text()) <= 90
            (alert,) = first.alerts()
            labels, host = alert["labels"], socket.gethostname()
            assert alert["status"] == "firing" and labels["alertname"] == "RLRankStuck"
            assert (labels["role"], labels["worker"], labels["rank"]) == ("rollout", STUCK, "0")
            assert (labels["phase"], labels["host"]) == (PHASE, host)
            assert (
                alert["annotations"]["summary"]
                == f"Rollout worker {STUCK} stuck in {PHASE} (hb/workers)"
            )
            description = alert["annotations"]["description"]
            assert description.startswith(
                f"rollout worker {STUCK} on host {host} has been in `{PHASE}`"
            )

            # every process closed cleanly: no beat left, the alert resolves, none other fired
            served = scrape(collector.metrics_url)
            assert not [name for name, _ in served if name.startswith("rltel_heartbeat_")]
            assert samples(served, "rltel_collector_heartbeats_dropped_total") == {(): 0.0}
            firing = 'ALERTS{alertname="RLRankStuck", alertstate="firing"}'
            wait_for(
                lambda: not servers.api(prometheus, "query", query=firing)["result"], 60, "resolved"
            )
            ever = servers.api(prometheus, "query", query=f"max_over_time({firing}[10m])")
            assert [r["metric"].get("worker") for r in ever["result"]] == [STUCK]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        hook.shutdown()
        code = collector.terminate()
    assert code == 0, "".join(collector.lines)
