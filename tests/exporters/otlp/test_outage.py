"""A collector outage seen from the trainer, with real processes and an exact ledger of the
steps committed and the steps that arrived: a trainer SIGKILLed during an outage (at any
moment, and the moment a commit returned while the queue's thread hangs on the endpoint),
``close`` across a collector restart, ``rltel spool flush``, and a spool on a full 2 MiB
tmpfs."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
from exporters.otlp.spool import Part, Spool
from exporters.queued import QueuedSink
from rltel.logger import StatsLogger
from telemetry.model.snapshot import Gauge, Snapshot, Step
from tests.distributed import free_port
from tests.telemetry.otlp_receiver import Receiver, is_heartbeat_request, step_of

from .spooled import held_under

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
STEPPED_TRAINER = """
import sys
from rltel.logger import StatsLogger
stats = StatsLogger({"fileroot": sys.argv[1], "otlp": {"endpoint": sys.argv[2],
                     "spool_dir": sys.argv[3], "timeout": 60.0}})
queue = next(queued for queued in stats.fanout.queued if queued.sink is stats.otlp)
for line in sys.stdin:  # "<step>" or "<step> delivered": commit when the test says so
    step, *delivered = line.split()
    stats.commit(0, int(step), int(step), {"loss": float(step)})
    assert not delivered or queue.force_flush(60.0), "not delivered"  # the answer came back
    print(step, flush=True)
"""


class HangingReceiver(Receiver):
    """A collector that holds each data request until ``release`` is set, then takes it: the
    sender's thread hangs inside the call until then. With ``pushback_ms`` it first answers
    one request RESOURCE_EXHAUSTED, asking for that delay (busy, not down)."""

    def __init__(self, port: int, pushback_ms: int | None = None) -> None:
        super().__init__(port)
        self.entered = threading.Event()
        self.release = threading.Event()
        if pushback_ms is not None:
            self.fail_with(grpc.StatusCode.RESOURCE_EXHAUSTED, 1, pushback_ms)
        self._pushback = pushback_ms is not None

    def Export(self, request, context):
        if not is_heartbeat_request(request) and not self._pushback:
            self.entered.set()
            self.release.wait(120.0)
        self._pushback = False
        return super().Export(request, context)


def steps(receiver: Receiver) -> list[int]:
    return [step_of(request) for request in receiver.requests]


def wait_until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def entries(spool_dir: Path) -> list[Part]:
    return held_under(spool_dir)


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


def test_a_step_committed_during_an_outage_is_on_disk_when_commit_returns(tmp_path):
    """The trainer is SIGKILLed the moment step 8's commit returned, while the queue's thread
    hangs resending the spool to a collector that does not answer: steps 6-8 were committed
    behind that thread's back, and each must be in the spool already."""
    spool_dir = tmp_path / "spool"
    first = Receiver().start()
    log = (tmp_path / "trainer.log").open("w")
    child = subprocess.Popen(
        [sys.executable, "-c", STEPPED_TRAINER, str(tmp_path), first.endpoint, str(spool_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    hanging = HangingReceiver(first.port)
    try:
        committed = Committed(child)

        def commit(step: int, delivered: str = "") -> None:
            child.stdin.write(f"{step} {delivered}\n")
            child.stdin.flush()
            committed.wait_for(step + 1)

        for step in range(5):
            commit(step, "delivered")  # answered before the outage: none is resent
        first.stop()  # the outage: step 5's request fails, and step 5 goes to the spool
        commit(5)
        wait_until(lambda: entries(spool_dir), 60.0)
        hanging.start()  # the queue's next resend of step 5 hangs there
        assert hanging.entered.wait(60.0), "the spool was not resent to the hanging collector"
        for step in (6, 7, 8):
            commit(step)
    finally:
        child.kill()  # SIGKILL the moment step 8's commit returned
        child.wait()
        hanging.release.set()
        hanging.stop()
        first.stop()
    assert committed.done() == list(range(9))
    second = Receiver(first.port).start()
    try:
        flushed = flush_cli(spool_dir, second.endpoint)
    finally:
        second.stop()
    assert flushed.returncode == 0, flushed.stderr + (tmp_path / "trainer.log").read_text()
    assert steps(first) == [0, 1, 2, 3, 4]
    assert steps(second) == [5, 6, 7, 8]  # every acknowledged step once, in order
    assert not entries(spool_dir)


def test_a_commit_during_an_outage_spools_the_steps_waiting_in_memory_first(tmp_path):
    """Steps 2-3 wait in memory while the collector asks for a delay (busy, not down); step 4
    is committed while the queue's thread hangs resending step 1: the commit writes 2, 3 and
    then 4 to the spool, and the spool replays 1-4 in order."""
    receiver = HangingReceiver(free_port(), pushback_ms=2000)
    spool = Spool(tmp_path / "spool", 10**7)
    sink = OtlpSink(receiver.endpoint, spool=spool, timeout_s=60.0, max_backoff_s=0.2)
    queued = QueuedSink.of(sink)
    try:
        queued.submit(step_snapshot(1))
        wait_until(lambda: len(spool) == 1)  # nothing listens: step 1 went to the spool
        receiver.start()  # step 1's resend is answered with a 2 s pushback
        wait_until(lambda: sink.sender.retry_after_s is not None)
        queued.submit(step_snapshot(2))
        queued.submit(step_snapshot(3))
        assert (queued.depth(), len(spool)) == (2, 1)  # busy, not down: they wait in memory
        assert receiver.entered.wait(60.0)  # the next resend of step 1 hangs
        queued.submit(step_snapshot(4))
        assert (queued.depth(), len(spool)) == (0, 4)  # on disk, in order, when submit returned
        receiver.release.set()
        assert receiver.wait_for(lambda requests: len(requests) == 4, 60.0)
    finally:
        receiver.release.set()
        queued.shutdown(10.0)
        receiver.stop()
    assert steps(receiver) == [1, 2, 3, 4]


def step_snapshot(step: int) -> Snapshot:
    return Snapshot((Gauge("loss", float(step)),), Step(0, step, step), (), time.time_ns())


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
    assert not entries(spool_dir) and not list(spool_dir.rglob("*.seg"))


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
