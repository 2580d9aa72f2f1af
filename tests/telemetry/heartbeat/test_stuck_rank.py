"""A stuck rank is named by a real Prometheus and Alertmanager, from rank 0's endpoint.

Three gloo ranks train a few steps; rank 2 then blocks inside ``record_timing
("ppo_actor/update")`` while ranks 0 and 1 wait at the next all-reduce, so rank 0's training
thread is stuck too. Every rank's heartbeat (1 s) reaches rank 0's Prometheus endpoint
through the job's store; Prometheus (1 s scrapes) evaluates the shipped ``RLRankStuck``
expression (``for`` shortened, ``heartbeat.stall_floor_s`` 10 s) and Alertmanager (shipped
config) posts to a webhook. Then rank 2 goes on, every rank finishes and closes cleanly.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from dashboards import build
from dashboards.webhook import WebhookReceiver
from tests.dashboards import servers
from tests.distributed import free_port, run_ranks

STEPS, STUCK_AT, STUCK_RANK, PHASE = 8, 4, 2, "ppo_actor/update"
FLOOR_S = 10.0


def _rank(rank: int, world: int, port: int, marks: str) -> list[tuple[int, bool]]:
    from telemetry import StatsLogger, stats_tracker
    from telemetry.heartbeat.board import StoreBoard, default_store

    config = {
        "experiment_name": "hb",
        "trial_name": "stuck",
        "console": {"enabled": False},
        "prometheus": {"enabled": True, "port": port},
        "heartbeat": {"interval_s": 1.0, "stall_floor_s": FLOOR_S},
    }
    logger = StatsLogger(config)
    stopped, release = Path(marks, "stopped"), Path(marks, "release")
    for step in range(STEPS):
        with stats_tracker.record_timing(PHASE):
            time.sleep(0.05)
            if rank == STUCK_RANK and step == STUCK_AT:
                stopped.write_text(repr(time.time()))
                deadline = time.monotonic() + 150
                while not release.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)  # the rank is stuck until the test has its alert
        dist.all_reduce(torch.ones(1))
        logger.commit(0, step, step, stats_tracker.export_all(reduce_group=dist.group.WORLD))
    logger.close()
    dist.barrier()
    beats = StoreBoard(default_store(), world, "trainer", 5.0).read() if rank == 0 else []
    return [(beat.rank, beat.exited) for beat in beats]


def _rules(tmp_path: Path) -> Path:
    """The shipped RLRankStuck rule, expression unchanged, evaluated every second, no ``for``."""
    shipped = yaml.safe_load(build.ALERTS_PATH.read_text())
    group = next(g for g in shipped["groups"] if g["name"] == "rltel-heartbeat")
    rule = next(r for r in group["rules"] if r["alert"] == "RLRankStuck")
    path = tmp_path / "rules.yml"
    test_group = {"name": "heartbeat", "interval": "1s", "rules": [dict(rule, **{"for": "0s"})]}
    path.write_text(yaml.safe_dump({"groups": [test_group]}))
    return path


@pytest.mark.timeout(300)
def test_a_stuck_rank_and_its_phase_reach_the_webhook(tmp_path):
    port = free_port()
    marks = tmp_path / "marks"
    marks.mkdir()
    receiver = WebhookReceiver(out=None, clock=time.time)
    results: dict[str, object] = {}

    def job() -> None:
        try:
            results["ranks"] = run_ranks(_rank, 3, port, str(marks), timeout=240)
        except BaseException as exc:  # reported on the main thread
            results["error"] = exc

    try:
        with (
            servers.alertmanager(tmp_path, receiver.url) as alertmanager,
            servers.prometheus(
                tmp_path,
                servers.prometheus_config(
                    f"127.0.0.1:{port}", alertmanager, _rules(tmp_path), True
                ),
            ),
        ):
            ranks = threading.Thread(target=job)
            ranks.start()
            try:
                deadline = time.monotonic() + 200
                while not receiver.notifications():
                    assert "error" not in results, results["error"]
                    assert time.monotonic() < deadline, "no RLRankStuck notification"
                    time.sleep(0.2)
            finally:
                (marks / "release").write_text("go")
                ranks.join(260)
    finally:
        receiver.shutdown()
    assert "error" not in results, results["error"]
    stopped = float((marks / "stopped").read_text())
    first = receiver.notifications()[0]
    assert first.received - stopped <= 90
    (alert,) = first.alerts()
    labels = alert["labels"]
    assert alert["status"] == "firing" and labels["alertname"] == "RLRankStuck"
    assert (labels["rank"], labels["phase"], labels["host"]) == (
        str(STUCK_RANK),
        PHASE,
        socket.gethostname(),
    )
    description = alert["annotations"]["description"]
    assert description.startswith(f"rank 2 on host {socket.gethostname()} has been in `{PHASE}`")
    # every rank exited cleanly, said so through the store, and raised nothing
    assert results["ranks"][0] == [(0, True), (1, True), (2, True)]
