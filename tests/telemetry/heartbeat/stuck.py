"""A 3-rank gloo job whose rank 2 blocks in a phase, watched by a real Prometheus and
Alertmanager: shared by the embedded test (rank 0's endpoint) and the collector test.

Three gloo ranks train a few steps; rank 2 then blocks inside ``record_timing
("ppo_actor/update")`` while ranks 0 and 1 wait at the next all-reduce, so rank 0's training
thread is stuck too. Prometheus (1 s scrapes) evaluates the shipped ``RLRankStuck``
expression (``for`` shortened) and Alertmanager (shipped config) posts to a webhook; then
rank 2 goes on, every rank finishes and closes cleanly.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml

from dashboards import build
from dashboards.webhook import Notification, WebhookReceiver
from tests.dashboards import servers
from tests.distributed import run_ranks

STEPS, STUCK_AT, STUCK_RANK, PHASE = 8, 4, 2, "ppo_actor/update"


def _rank(rank: int, world: int, sink: dict, marks: str) -> list[tuple[int, bool]]:
    from rltel import StatsLogger
    from telemetry import stats_tracker
    from telemetry.heartbeat.board import StoreBoard, default_store

    config = {"experiment_name": "hb", "trial_name": "stuck", "console": {"enabled": False}}
    logger = StatsLogger({**config, **sink})
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


def stuck_job(tmp_path: Path, target: str, sink: dict) -> tuple[Notification, Any]:
    """Run the job with ``sink`` (the StatsLogger's sections) while Prometheus scrapes
    ``target``; the first notification, and each rank's result (rank 0: every rank's last
    beat in the store, ``(rank, exited)``). Fails when no alert comes within 200 s."""
    marks = tmp_path / "marks"
    marks.mkdir()
    receiver = WebhookReceiver(out=None, clock=time.time)
    results: dict[str, object] = {}

    def job() -> None:
        try:
            results["ranks"] = run_ranks(_rank, 3, sink, str(marks), timeout=240)
        except BaseException as exc:  # reported on the main thread
            results["error"] = exc

    try:
        with (
            servers.alertmanager(tmp_path, receiver.url) as alertmanager,
            servers.prometheus(
                tmp_path, servers.prometheus_config(target, alertmanager, _rules(tmp_path), True)
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
    first = receiver.notifications()[0]
    stopped = float((marks / "stopped").read_text())
    assert first.received - stopped <= 90
    (alert,) = first.alerts()
    labels = alert["labels"]
    assert alert["status"] == "firing" and labels["alertname"] == "RLRankStuck"
    host = socket.gethostname()
    assert (labels["rank"], labels["phase"], labels["host"]) == (str(STUCK_RANK), PHASE, host)
    description = alert["annotations"]["description"]
    assert description.startswith(f"rank {STUCK_RANK} on host {host} has been in `{PHASE}`")
    return first, results["ranks"]
