"""Rollout windows waiting in the collector's merger survive a SIGKILL (the durable queue).

Three rollout workers and a trainer send through a real ``rltel collector`` process (raw
OTLP/gRPC, one request at a time, so every window belongs to the training step sent after
it); the collector is SIGKILLed mid-run, right after it acknowledged one, two or three
windows of a step whose training request has not come yet (they sit in its merger, while
its sinks may still be writing earlier steps), and restarted on the same state directory;
the senders go on from the next request. The ledger: every step's merged
rollout values in TensorBoard and in W&B (offline, read back with W&B's reader) are the
ones the acknowledged windows make, each step once.
"""

from __future__ import annotations

import glob
import signal
import threading
import time
from collections import Counter as Tally
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

from collector.durable import DurableState
from collector.merge import RolloutMerger
from collector.pipeline import Pipeline
from collector.refusals import Refused
from collector.runs import Run
from exporters.base import InMemorySink
from exporters.fanout import FanOut
from exporters.journal import Journal
from exporters.memory_charge import MemoryCharge
from telemetry.model.names import CLOSED_METRIC, STEP_METRIC
from telemetry.model.snapshot import Counter, Gauge, Histogram, Snapshot, Step
from telemetry.otlp.encode import encode
from tests.wandb_log import inspect_wandb

from .test_integration import METHOD, RUN, CollectorProcess, assert_each_step_once, train_request

STEPS = 16
WORKERS = 3


def window(worker: int, step: int) -> bytes:
    """Worker ``worker``'s window for ``step``: a histogram (count w+1, values 10*step+w) and
    its cumulative token counter (worker 0 reports it on odd steps only)."""
    n = worker + 1
    value = 10.0 * step + worker
    points: list = [Histogram("rollout/reward", n, n * value, value, value)]
    if worker or step % 2:
        points.append(Counter("rollout/tokens", 100.0 * n * step))
    resource = (*RUN, ("rltel.role", "rollout"), ("rltel.worker_id", f"w{worker}"))
    snapshot = Snapshot(tuple(points), None, resource, time.time_ns(), "rollout")
    (data,) = encode(snapshot)
    return encode_metrics(data).SerializeToString()


def requests() -> list[tuple[str, int, bytes]]:
    """``(what, step, body)`` in sending order: each step's windows, then the step."""
    out = []
    for step in range(1, STEPS + 1):
        out += [(f"w{w}", step, window(w, step)) for w in range(WORKERS)]
        out.append(("train", step, train_request(step, 2)))
    return out


def expected(step: int) -> dict[str, float]:
    """The merged values of ``step``: count-weighted reward, the workers' latest tokens."""
    weights = range(1, WORKERS + 1)
    rewards = [10.0 * step + w for w in range(WORKERS)]
    avg = sum(n * r for n, r in zip(weights, rewards)) / sum(weights)
    worker0 = step if step % 2 else step - 1  # its latest total: the last odd step
    tokens = 100.0 * worker0 + sum(100.0 * (w + 1) * step for w in range(1, WORKERS))
    return {
        "rollout/reward/avg": avg,
        "rollout/reward/min": rewards[0],
        "rollout/reward/max": rewards[-1],
        "rollout/tokens": tokens,
    }


def send(endpoint: str, todo: list, acked: list) -> None:
    """Send ``todo`` in order, each acknowledged before the next."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None)
        for what, step, body in todo:
            call(body, timeout=30)
            acked.append((what, step))


def collector(tmp_path: Path, state: Path) -> CollectorProcess:
    sinks = {"tensorboard": {"path": str(tmp_path / "tb")}, "wandb": {"mode": "offline"}}
    return CollectorProcess(tmp_path, sinks, durable={"directory": str(state)}, start_timeout=120)


def wandb_rows(files: Path) -> list[dict]:
    """The history rows holding rollout keys, over every offline part of the run."""
    parts = sorted(glob.glob(str(files / "exp" / "t1" / "wandb" / "offline-run-*" / "*.wandb")))
    rows = []
    with ThreadPoolExecutor(len(parts)) as pool:  # one W&B CLI process per part, at once
        for records in pool.map(inspect_wandb, parts):
            for record in records:
                row = record["history"]["item"] if record["type"] == "history" else {}
                if any(key.startswith("rollout/") for key in row):
                    rows.append(row)
    return rows


@pytest.mark.parametrize(("step", "pending"), [(3, 1), (8, 2), (13, 3)])
def test_sigkill_keeps_every_acknowledged_rollout_window_in_the_sinks_once(tmp_path, step, pending):
    state = tmp_path / "state"
    todo = requests()
    at = (step - 1) * (WORKERS + 1) + pending  # after ``pending`` windows of ``step``
    acked: list = []
    first = collector(tmp_path, state)
    try:
        send(first.endpoint, todo[:at], acked)
    finally:
        first.proc.kill()
    assert first.proc.wait(30) == -signal.SIGKILL, "".join(first.lines)
    assert acked[-pending:] == [(f"w{w}", step) for w in range(pending)]  # in the merger

    second = collector(tmp_path, state)  # replays journals and merger before any request
    try:
        send(second.endpoint, todo[at:], acked)
    finally:
        code = second.stop(signal.SIGTERM, timeout=120)
    assert code == 0, "".join(second.lines)
    assert Tally(acked) == Tally((what, step) for what, step, _ in todo)  # each once

    assert_each_step_once(tmp_path / "tb" / "exp" / "t1", expected, STEPS)
    rows = wandb_rows(tmp_path / "files")
    steps = [int(row["rollout/step"]) for row in rows]  # the rollout stream's W&B axis
    assert steps == list(range(1, STEPS + 1))  # each step once, in order
    for row in rows:
        want = expected(int(row["rollout/step"]))
        assert {key: row[key] for key in want} == pytest.approx(want, rel=1e-6), row
    assert not state.exists()  # everything delivered: the journals were emptied


def _window(worker: int, value: float, time_ns: int, tokens: float | None = None) -> Snapshot:
    points: list = [Histogram("rollout/reward", 1, value, value, value)]
    if tokens is not None:
        points.append(Counter("rollout/tokens", tokens))
    resource = (*RUN, ("rltel.role", "rollout"), ("rltel.worker_id", f"w{worker}"))
    return Snapshot(tuple(points), None, resource, time_ns, "rollout")


def _train(step: int) -> Snapshot:
    return Snapshot((), Step(0, step, step), (*RUN, ("rltel.rank", 0)), step)


def _merged(released: list[Snapshot]) -> dict[str, float]:
    (snapshot,) = released
    return snapshot.flat()


def test_a_new_merger_on_the_journal_takes_up_the_windows_step_totals_and_last_window(tmp_path):
    """What a killed process left (no close): the windows after the last checkpoint merge
    again, a retried window and a retried training step change nothing, totals carry on."""
    journal = Journal(tmp_path, 1 << 20, fsync=False)
    merger = RolloutMerger()
    merger.journal_to(journal)
    merger.add(_window(0, 1.0, 10, tokens=100.0))
    merger.add(_window(1, 2.0, 11, tokens=50.0))
    assert _merged(merger.on_train(_train(1)))["rollout/tokens"] == 150.0
    merger.checkpoint()
    retried = _window(1, 4.0, 12)
    merger.add(retried)  # journaled, then the process is killed before it answers

    again = RolloutMerger()
    again.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
    assert again.add(retried) is False and again.duplicates == 1  # the sender's retry
    assert again.on_train(_train(1)) == []  # a retried step 1 releases nothing
    again.add(_window(0, 6.0, 13, tokens=130.0))  # worker 1's total 50 carried over
    merged = _merged(again.on_train(_train(2)))
    assert merged["rollout/reward/avg"] == 5.0  # (4 + 6) / 2: the kept window once
    assert merged["rollout/tokens"] == 180.0


def test_a_clean_shutdown_leaves_the_merge_journal_empty(tmp_path):
    journal = Journal(tmp_path, 1 << 20, fsync=False)
    merger = RolloutMerger()
    merger.journal_to(journal)
    merger.add(_window(0, 1.0, 10))
    assert merger.flush()
    merger.checkpoint(final=True)
    journal.close()
    assert not list(tmp_path.glob("*.seg"))
    assert Journal(tmp_path, 1 << 20, fsync=False).pending == []


@pytest.mark.parametrize("closed", [False, True])
def test_a_clean_shutdown_keeps_waiting_windows_while_the_trainer_runs(tmp_path, closed):
    """Windows waiting at a clean stop stay journaled for their own step, unless the trainer
    closed (then they go at the last step seen, and the journal empties)."""
    journal = Journal(tmp_path, 1 << 20, fsync=False)
    merger = RolloutMerger()
    merger.journal_to(journal)
    sink = InMemorySink()
    run = Run(FanOut([sink]), merger, threading.Lock())
    last = Snapshot(
        (Gauge(CLOSED_METRIC, 1.0),) if closed else (Gauge(STEP_METRIC, 1.0),),
        Step(0, 1, 1),
        (*RUN, ("rltel.rank", 0)),
        1,
    )
    charge = MemoryCharge(0, lambda _: None)
    run.route(last, charge)
    run.route(_window(0, 2.0, 10), charge)
    run.flush()
    run.fanout.shutdown(10)
    journal.close()
    rollout = [s for s in sink.snapshots if s.stream == "rollout"]
    if closed:
        assert [s.step.global_step for s in rollout] == [1]
        assert Journal(tmp_path, 1 << 20, fsync=False).pending == []
    else:
        assert rollout == []
        again = RolloutMerger()
        again.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
        (released,) = again.on_train(_train(2))
        assert released.step.global_step == 2


def _request(pipeline: Pipeline, snapshot: Snapshot):
    (data,) = encode(snapshot)
    return pipeline.decoder.read(encode_metrics(data))


def test_a_full_merge_journal_refuses_windows_retryably_until_a_step_releases_them(tmp_path):
    state = DurableState(tmp_path / "state", 2048, False, "collector.durable.directory")
    pipeline = Pipeline([], lambda experiment, trial: [InMemorySink()])
    pipeline.recover(state)
    pipeline.consume(_request(pipeline, _train(1)))  # opens the run
    sent = 0
    with pytest.raises(Refused, match="rollout merge journal full") as refused:
        for sent in range(1, 100):
            pipeline.consume(_request(pipeline, _window(0, float(sent), sent)))
    assert refused.value.code is grpc.StatusCode.UNAVAILABLE and refused.value.retry
    assert 1 < sent < 99
    pipeline.consume(_request(pipeline, _train(2)))  # releases the windows: journal acked
    pipeline.consume(_request(pipeline, _window(0, 1.0, 1000)))
    pipeline.shutdown(10.0)


def test_windows_before_a_checkpoint_whose_ack_failed_are_not_merged_again(tmp_path):
    """A kill between a checkpoint's write and its acknowledgement (here the ack's write
    fails: ``acked`` is a directory) leaves the released windows before the checkpoint:
    the next merger takes only the windows after it."""
    (tmp_path / "acked").mkdir()
    merger = RolloutMerger()
    merger.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
    merger.add(_window(0, 1.0, 10))
    assert _merged(merger.on_train(_train(1)))["rollout/reward/avg"] == 1.0
    merger.checkpoint()
    merger.add(_window(0, 3.0, 11))  # waits for step 2; then the process is killed

    again = RolloutMerger()
    again.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
    assert _merged(again.on_train(_train(2)))["rollout/reward/avg"] == 3.0


def test_each_worker_keeps_its_own_total_and_last_window_across_a_checkpoint(tmp_path):
    """The checkpoint restores every worker under its own resource: a silent worker's total
    still counts, and its retried last window is known as a duplicate."""
    merger = RolloutMerger()
    merger.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
    last = _window(0, 1.0, 10, tokens=100.0)
    merger.add(last)
    merger.add(_window(1, 2.0, 11, tokens=50.0))
    merger.on_train(_train(1))
    merger.checkpoint()

    again = RolloutMerger()
    again.journal_to(Journal(tmp_path, 1 << 20, fsync=False))
    assert again.add(last) is False  # worker 0's retry, known from the checkpoint alone
    again.add(_window(1, 4.0, 12, tokens=70.0))
    assert _merged(again.on_train(_train(2)))["rollout/tokens"] == 170.0  # worker 0's 100 kept


def _reopened(path: Path) -> RolloutMerger:
    merger = RolloutMerger()
    merger.journal_to(Journal(path, 1 << 20, fsync=False))
    return merger


def test_different_windows_at_the_same_time_are_each_merged(tmp_path):
    """With the journal a worker's last window is kept as a digest: a window at the same time
    with other points is no retry, whichever way the digests compare."""
    merger = _reopened(tmp_path)
    values = [float(v) for v in range(1, 13)]
    assert [merger.add(_window(0, v, 10)) for v in values] == [True] * len(values)
    assert merger.add(_window(0, values[-1], 10)) is False and merger.duplicates == 1
    released = _merged(merger.on_train(_train(1)))
    assert released["rollout/reward/avg"] == sum(values) / len(values)


def test_a_checkpoint_acknowledges_every_window_before_it_and_writes_nothing_twice(tmp_path):
    merger = _reopened(tmp_path)
    for w in range(3):
        merger.add(_window(w, 1.0, 10 + w))
    journal = merger.journal
    windows = journal.last_seq
    merger.on_train(_train(1))
    merger.checkpoint()  # one record per worker
    assert journal.last_seq == windows + 3
    merger.checkpoint()  # nothing new (another training snapshot of the same step)
    merger.on_train(_train(1))
    merger.checkpoint()
    assert journal.last_seq == windows + 3
    merger.add(_window(0, 2.0, 13))
    journal.close()
    pending = Journal(tmp_path, 1 << 20, fsync=False).pending
    assert [seq for seq, _ in pending] == [windows + i for i in range(1, 5)]
    assert [s.stream for _, s in pending] == ["rltel.merge/rollout"] * 3 + ["rollout"]


def test_a_step_without_windows_is_checkpointed_too(tmp_path):
    """A training step that releases nothing still moves the checkpoint's step: after a
    restart its retry releases nothing, and the windows go at the step after it."""
    merger = _reopened(tmp_path)
    merger.add(_window(0, 1.0, 10))
    merger.on_train(_train(1))
    merger.checkpoint()
    assert merger.on_train(_train(2)) == []  # no windows came for step 2
    merger.checkpoint()
    merger.add(_window(0, 3.0, 11))  # waits for step 3; then the process is killed

    again = _reopened(tmp_path)
    assert again.step == Step(0, 2, 2)
    assert again.on_train(_train(2)) == []  # step 2's request retried
    (released,) = again.on_train(_train(3))
    assert released.step == Step(0, 3, 3) and released.flat()["rollout/reward/avg"] == 3.0


def test_the_step_is_the_last_checkpoints_when_earlier_ones_were_not_acknowledged(tmp_path):
    (tmp_path / "acked").mkdir()  # every ack fails: each checkpoint stays in the journal
    merger = _reopened(tmp_path)
    for step in (1, 2):
        merger.add(_window(0, float(step), 10 + step))
        merger.on_train(_train(step))
        merger.checkpoint()
    merger.add(_window(0, 5.0, 20))  # waits for step 3; then the process is killed

    again = _reopened(tmp_path)
    assert again.step == Step(0, 2, 2)
    assert again.on_train(_train(2)) == []
    assert _merged(again.on_train(_train(3)))["rollout/reward/avg"] == 5.0


def _run(resource) -> tuple:
    return tuple((k, v) for k, v in resource if k in ("rltel.experiment", "rltel.trial"))


def test_the_run_resource_is_restored_from_a_checkpoint(tmp_path):
    merger = _reopened(tmp_path)
    merger.add(_window(0, 1.0, 10))
    merger.on_train(_train(1))
    merger.checkpoint()

    again = _reopened(tmp_path)  # neither the next window nor the trainer name the run
    bare = (("rltel.role", "rollout"), ("rltel.worker_id", "w1"))
    again.add(Snapshot((Histogram("rollout/reward", 1, 2.0, 2.0, 2.0),), None, bare, 11, "rollout"))
    (released,) = again.on_train(Snapshot((), Step(0, 2, 2), (("rltel.rank", 0),), 2))
    assert released.resource == (*_run(RUN), ("rltel.role", "rollout"), ("rltel.stream", "rollout"))


def test_a_checkpoint_keeps_each_workers_totals_per_stream(tmp_path):
    """A worker without a counter that another reports, a stream named by another string
    object, and one resource sending both streams: each total comes back where it was."""
    merger = _reopened(tmp_path)
    same = (*RUN, ("rltel.worker_id", "w0"))
    rollout, also_rollout = "".join(["roll", "out"]), "".join(["rol", "lout"])
    merger.add(Snapshot((Counter("tokens", 7.0),), None, same, 10, "eval"))
    merger.add(Snapshot((Histogram("r", 1, 1.0, 1.0, 1.0),), None, same, 11, rollout))
    counters = (Counter("tokens", 100.0), Counter("samples", 30.0))
    merger.add(Snapshot(counters, None, same, 12, also_rollout))
    merger.add(Snapshot((Counter("samples", 4.0),), None, same, 13, "eval"))
    merger.add(_window(1, 2.0, 14))  # no counter
    merger.on_train(_train(1))
    merger.checkpoint()

    again = _reopened(tmp_path)
    counters = (Counter("tokens", 50.0), Counter("samples", 5.0))
    again.add(Snapshot(counters, None, _window(2, 0.0, 0).resource, 15, "rollout"))
    counters = (Counter("tokens", 3.0), Counter("samples", 1.0))
    again.add(Snapshot(counters, None, (*RUN, ("rltel.worker_id", "e2")), 16, "eval"))
    released = {s.stream: s.flat() for s in again.on_train(_train(2))}
    assert released == {
        "rollout": {"tokens": 100.0 + 50.0, "samples": 30.0 + 5.0},
        "eval": {"tokens": 7.0 + 3.0, "samples": 4.0 + 1.0},
    }


def test_a_retried_training_step_leaves_the_windows_waiting_for_the_next_one_journaled(tmp_path):
    """Every rank-0 snapshot ends in a checkpoint (Run.route), also one that releases
    nothing (a retried training request whose answer was lost): the windows waiting for the
    next step were acknowledged to their senders, so a kill then must not lose them."""
    merger = _reopened(tmp_path)
    run = Run(FanOut([InMemorySink()]), merger, threading.Lock())
    charge = MemoryCharge(0, lambda _: None)
    run.route(_window(0, 1.0, 10), charge)
    run.route(_train(1), charge)
    run.route(_window(0, 3.0, 11), charge)  # waits for step 2
    run.route(_train(1), charge)  # step 1's request again: releases nothing
    run.fanout.shutdown(10)  # then the process is killed (no flush)

    again = _reopened(tmp_path)
    assert _merged(again.on_train(_train(2)))["rollout/reward/avg"] == 3.0
