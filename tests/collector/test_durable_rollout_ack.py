"""A restarted collector never merges a released rollout window twice.

A checkpoint acknowledges the merge journal up to the windows its training step released;
a kill between the checkpoint's write and its acknowledgement leaves the next collector
windows followed by their checkpoint. That state is made here by the file system, not by
timing: the merge journal's ``acked`` is made a directory, so every acknowledgement of the
first collector fails (logged; the records stay). The collector, a real process fed by three
rollout workers and a trainer over OTLP/gRPC, is SIGKILLed after a release, the directory is
removed (the disk recovered), and a second collector takes up the journals: every step's
merged rollout values in TensorBoard are the ones its own windows make, each step once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from collector.merge import read_checkpoint
from exporters.journal import Journal

from .test_durable_rollout import STEPS, WORKERS, expected, requests, send
from .test_integration import CollectorProcess, assert_each_step_once

RELEASED = 5  # training steps the first collector releases before it is killed


def collector(tmp_path: Path, state: Path) -> CollectorProcess:
    sinks = {"tensorboard": {"path": str(tmp_path / "tb")}}
    return CollectorProcess(tmp_path, sinks, durable={"directory": str(state)}, start_timeout=120)


@pytest.mark.parametrize("pending", [0, 2])
def test_windows_before_an_unacknowledged_checkpoint_are_not_merged_again(tmp_path, pending):
    state = tmp_path / "state"
    todo = requests()
    at = RELEASED * (WORKERS + 1) + pending  # after step RELEASED, and ``pending`` windows
    acked: list = []
    first = collector(tmp_path, state)
    try:
        send(first.endpoint, todo[:1], acked)  # the first window opens the run's journals
        (merge,) = state.glob("runs/*/rollout-merge")
        assert not (merge / "acked").exists()  # nothing acknowledged yet
        (merge / "acked").mkdir()  # every acknowledgement's write fails from here on
        send(first.endpoint, todo[1:at], acked)
    finally:
        first.proc.kill()
    assert first.proc.wait(30) == -signal.SIGKILL, "".join(first.lines)

    left = Journal(merge, 1 << 30, fsync=False).pending  # what the next collector reads
    states = [read_checkpoint(snapshot) for _, snapshot in left]
    checkpoints = [s.step.global_step for s in states if s is not None]
    assert sorted(set(checkpoints)) == list(range(1, RELEASED + 1))  # none acknowledged
    windows = len(left) - len(checkpoints)
    assert windows == RELEASED * WORKERS + pending  # the released windows are still there
    (merge / "acked").rmdir()

    second = collector(tmp_path, state)  # merges again only what follows the checkpoint
    try:
        send(second.endpoint, todo[at:], acked)
    finally:
        code = second.stop(signal.SIGTERM, timeout=120)
    assert code == 0, "".join(second.lines)
    assert len(acked) == len(todo)
    assert_each_step_once(tmp_path / "tb" / "exp" / "t1", expected, STEPS)
    assert not state.exists()  # everything delivered: the journals were emptied
