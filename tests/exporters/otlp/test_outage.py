"""A collector outage seen from the trainer, with real processes and an exact ledger of the
steps committed and the steps that arrived: a trainer SIGKILLed during an outage, ``close``
across a collector restart, ``rltel spool flush``, and a spool on a full 2 MiB tmpfs."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exporters.otlp.sink import HEALTH_POINTS
from rltel.logger import StatsLogger
from tests.telemetry.otlp_receiver import Receiver, step_of

ROOT = Path(__file__).resolve().parents[3]
TRAINER = """
import sys, time
from rltel.logger import StatsLogger
stats = StatsLogger({"fileroot": sys.argv[1], "otlp": {"endpoint": sys.argv[2],
                     "spool_dir": sys.argv[3], "timeout": 2.0}})
step = 0
while True:
    stats.commit(0, step, step, {"loss": float(step)})
    print(step, flush=True)
    step += 1
    time.sleep(0.02)
"""


def steps(receiver: Receiver) -> list[int]:
    return [step_of(request) for request in receiver.requests]


def wait_until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def entries(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.rglob("*.json"))


def flush_cli(spool_dir: Path, endpoint: str, *extra: str) -> subprocess.CompletedProcess:
    command = ["spool", "flush", str(spool_dir), "--endpoint", endpoint, *extra]
    return subprocess.run(
        [sys.executable, "-m", "rltel.cli", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


class Committed:
    """The steps a child trainer printed after each ``commit`` returned, read on a thread."""

    def __init__(self, child: subprocess.Popen) -> None:
        self._cond = threading.Condition()
        self.steps: list[int] = []
        self._thread = threading.Thread(target=self._read, args=(child,), daemon=True)
        self._thread.start()

    def _read(self, child: subprocess.Popen) -> None:
        for line in child.stdout:
            with self._cond:
                self.steps.append(int(line))
                self._cond.notify_all()

    def wait_for(self, count: int, timeout_s: float = 60.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.steps) >= count, timeout_s)

    def done(self) -> list[int]:
        self._thread.join(30.0)
        return list(self.steps)


@pytest.mark.parametrize("outage_s", [0.5, 1.0, 3.0])
def test_a_trainer_killed_during_an_outage_loses_at_most_the_step_in_flight(tmp_path, outage_s):
    spool_dir = tmp_path / "spool"
    first = Receiver().start()
    child = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(tmp_path), first.endpoint, str(spool_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        committed = Committed(child)
        assert first.wait_for(lambda requests: len(requests) >= 5, 60.0)
        first.stop()  # the outage starts
        at_stop = len(committed.steps)
        time.sleep(outage_s)  # the scenario: the trainer commits on for outage_s
        committed.wait_for(at_stop + 1)  # at least one step committed during the outage
    finally:
        child.kill()  # SIGKILL: no close(), no atexit
        child.wait()
    ledger = committed.done()
    log = child.stderr.read()
    second = Receiver(first.port).start()  # a new collector on the same port
    try:
        flushed = flush_cli(spool_dir, second.endpoint)
    finally:
        second.stop()
    assert flushed.returncode == 0, flushed.stderr
    assert "delivered" in flushed.stdout and not entries(spool_dir)
    arrived = steps(first) + steps(second)
    last = ledger[-1]
    assert set(ledger) - set(arrived) <= {last}  # at most the step being handed over
    assert set(arrived) <= {*ledger, last + 1}  # committed, its print not yet read
    assert len(arrived) - len(set(arrived)) <= 1  # the request cut by the stop, resent
    assert steps(second) == sorted(steps(second))  # the spool replays in order
    assert steps(second), "nothing was spooled during the outage"
    # The outage is logged once (not per step), naming the spool and the command to send it.
    ours = [line for line in log.splitlines() if line.startswith("otlp")]
    assert len(ours) == 1 and "failed (UNAVAILABLE)" in ours[0], log
    assert f"rltel spool flush {spool_dir / 'trainer'} --endpoint {first.endpoint}" in log


@pytest.mark.parametrize("restart_s", [0.5, 1.0, 1.5])
def test_close_keeps_trying_across_a_collector_restart_and_leaves_nothing_spooled(
    tmp_path, restart_s
):
    spool_dir = tmp_path / "spool"
    receiver = Receiver().start()
    config = {"fileroot": str(tmp_path), "otlp": {"endpoint": receiver.endpoint}}
    config["otlp"]["spool_dir"] = str(spool_dir)
    stats = StatsLogger(config)
    for step in range(5):
        stats.commit(0, step, step, {"loss": float(step)})
    wait_until(lambda: stats.otlp.health()["requests_exported"] == 5)  # answered, not just taken
    receiver.stop()
    for step in range(5, 15):  # committed while the collector is down: spooled
        stats.commit(0, step, step, {"loss": float(step)})
    restart = threading.Timer(restart_s, receiver.start)
    restart.start()
    try:
        start = time.monotonic()
        stats.close(30.0)
        elapsed = time.monotonic() - start
        restart.join()
        receiver.wait_for(lambda requests: len(requests) >= 16, 30.0)
    finally:
        restart.cancel()
        receiver.stop()
    assert steps(receiver) == [*range(15), 14]  # every step once, then the close marker
    assert elapsed < 30.0  # close returned once everything was delivered
    health = stats.otlp.health()
    assert health["spool_points"] == 0 and health["points_dropped"] == 0
    assert health["points_spooled"] > 0  # the outage's steps went through the spool
    assert not entries(spool_dir)


def spool_left_by_a_run(tmp_path: Path, endpoint: str, count: int) -> Path:
    """A run that committed ``count`` steps with its collector down, closed (spooled)."""
    spool_dir = tmp_path / "spool"
    stats = StatsLogger(
        {"fileroot": str(tmp_path), "otlp": {"endpoint": endpoint, "spool_dir": str(spool_dir)}}
    )
    for step in range(count):
        stats.commit(0, step, step, {"loss": float(step)})
    stats.close(0.5)
    assert stats.otlp.health()["spool_points"] > 0
    return spool_dir


@pytest.mark.parametrize("count", [1, 10, 40])
def test_rltel_spool_flush_delivers_a_spool_in_order_and_empties_it(tmp_path, count):
    receiver = Receiver()  # down while the run commits
    spool_dir = spool_left_by_a_run(tmp_path, receiver.endpoint, count)
    with receiver:
        flushed = flush_cli(spool_dir, receiver.endpoint)
    assert flushed.returncode == 0, flushed.stderr
    assert flushed.stdout.count("\n") == 1 and flushed.stderr == ""
    assert f"{count + 1} requests" in flushed.stdout  # the steps and the close marker
    assert steps(receiver) == [*range(count), count - 1]
    assert not entries(spool_dir)


def test_rltel_spool_flush_with_the_collector_down_says_so_in_one_line_and_keeps_the_spool(
    tmp_path,
):
    down = Receiver()
    spool_dir = spool_left_by_a_run(tmp_path, down.endpoint, 3)
    before = entries(spool_dir)
    flushed = flush_cli(spool_dir, down.endpoint, "--timeout", "0.5")
    assert flushed.returncode == 1 and flushed.stdout == ""
    assert flushed.stderr.count("\n") == 1
    assert "4 requests" in flushed.stderr and "left on disk" in flushed.stderr
    assert "UNAVAILABLE" in flushed.stderr
    assert entries(spool_dir) == before


def test_the_stats_logger_flushes_the_spool_its_config_names(tmp_path):
    receiver = Receiver()
    spool_left_by_a_run(tmp_path, receiver.endpoint, 5)
    config = {"fileroot": str(tmp_path), "otlp": {"spool_dir": str(tmp_path / "spool")}}
    with receiver:
        report = StatsLogger.flush_spool(config, endpoint=receiver.endpoint, timeout_s=30.0)
    assert report.complete and report.delivered_requests == 6
    assert steps(receiver) == [*range(5), 4]
    with pytest.raises(Exception, match="stats_logger.otlp.endpoint"):
        StatsLogger.flush_spool(config)


@pytest.mark.parametrize("keys", [50, 100, 200])
def test_a_full_disk_under_the_spool_logs_a_bounded_number_of_lines(
    tmp_path, tiny_fs, caplog, keys
):
    caplog.set_level(logging.INFO)
    down = Receiver()
    stats = StatsLogger(
        {"fileroot": str(tmp_path), "otlp": {"endpoint": down.endpoint, "spool_dir": str(tiny_fs)}}
    )
    data = {f"ppo_actor/update/key_{i}": float(i) for i in range(keys)}
    count = 400
    for step in range(count):
        stats.commit(0, step, step, data)
    stats.close(0.5)
    health = stats.otlp.health()
    assert health["points_dropped"] > 0 and health["spool_points"] > 0  # the disk filled
    # Exact ledger: every point was spooled or counted dropped (steps + the close marker).
    sent = count * (keys + 1 + HEALTH_POINTS) + 2 + HEALTH_POINTS
    assert health["spool_points"] + health["points_dropped"] == sent
    ours = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(ours) <= 4, [r.getMessage() for r in ours]
    assert sum("cannot write" in r.getMessage() for r in ours) == 1


def test_rltel_spool_flush_sends_the_headers_of_a_stats_logger_config(tmp_path):
    receiver = Receiver()
    spool_dir = spool_left_by_a_run(tmp_path, receiver.endpoint, 2)
    config = tmp_path / "experiment.yaml"
    config.write_text(
        "stats_logger:\n  otlp:\n    endpoint: 127.0.0.1:1\n"
        "    headers: {authorization: Bearer s3cret}\n"
    )
    with receiver:
        flushed = flush_cli(spool_dir, receiver.endpoint, "--config", str(config))
    assert flushed.returncode == 0, flushed.stderr
    assert steps(receiver) == [0, 1, 1]  # to --endpoint, not the config's
    assert [m.get("authorization") for m in receiver.metadata] == ["Bearer s3cret"] * 3
    assert "s3cret" not in flushed.stdout + flushed.stderr
