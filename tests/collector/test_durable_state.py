"""The collector's state directory: one collector at a time, removed once everything is held,
and a pipeline that replays a stored run's journals before any request."""

from __future__ import annotations

import os
import threading

import pytest

from collector.config import LimitsConfig
from collector.durable import DurableState
from collector.pipeline import Pipeline
from collector.sinks import SinksFailed
from exporters.base import ExportResult, InMemorySink
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Gauge, Snapshot, Step

KEY = "collector.durable.directory"
RUN = (("rltel.experiment", "exp"), ("rltel.trial", "t1"), ("rltel.rank", 0))


def test_a_second_collector_on_the_same_directory_is_refused_naming_the_key(tmp_path):
    first = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    with pytest.raises(ConfigError, match=f"{KEY}: .* held by another running collector"):
        DurableState(tmp_path / "state", 1 << 20, False, KEY)
    first.close()
    DurableState(tmp_path / "state", 1 << 20, False, KEY).close()  # free again


def test_an_unusable_directory_is_a_config_error_naming_the_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=f"{KEY}: cannot use"):
        DurableState(blocker / "state", 1 << 20, False, KEY)


class Stuck(InMemorySink):
    """Never answers until released: the first process's sink when it is killed."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        self.release.wait(60)
        return ExportResult.FAILURE


def test_a_stored_run_is_replayed_into_its_sinks_before_any_request(tmp_path):
    state = tmp_path / "state"
    stuck = Stuck()
    limits = LimitsConfig(sink_timeout_s=60.0)
    first = Pipeline([], lambda experiment, trial: [stuck], limits)
    first.recover(DurableState(state, 1 << 20, True, KEY))
    for step in (1, 2):
        snapshot = Snapshot((Gauge("loss", float(step)),), Step(0, step, step), RUN)
        first.runs.of(snapshot).route(snapshot, None)
    first.durable.sync()
    assert list(state.glob("runs/*/run.json")) and list(state.glob("runs/*/memory/*.seg"))
    os.close(first.durable._lock_fd)  # the process is killed: its lock goes with it

    got: list[InMemorySink] = []
    second = Pipeline([], lambda experiment, trial: got.append(InMemorySink()) or got, limits)
    second.recover(DurableState(state, 1 << 20, True, KEY))
    assert len(got) == 1  # the run was opened at start, not on a request
    assert second.force_flush(30)
    assert [s.step.global_step for s in got[0].snapshots] == [1, 2]
    second.shutdown(30)
    assert not state.exists()  # everything held: removed at the clean shutdown
    stuck.release.set()


def test_a_journal_of_a_sink_the_collector_no_longer_runs_is_named_and_left(tmp_path, caplog):
    gone = tmp_path / "state" / "shared" / "remote_write"
    gone.mkdir(parents=True)
    (gone / "0000000000000000.seg").write_bytes(b"held")
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    pipeline = Pipeline([InMemorySink()], None, LimitsConfig())
    pipeline.recover(state)
    assert f"{gone} is no sink of this collector" in caplog.text
    pipeline.shutdown(10)
    assert (gone / "0000000000000000.seg").exists()  # not removed with the rest


def test_a_stored_run_whose_sinks_cannot_start_keeps_its_journal(tmp_path):
    state = tmp_path / "state"
    stuck = Stuck()
    first = Pipeline([], lambda experiment, trial: [stuck], LimitsConfig(sink_timeout_s=60.0))
    first.recover(DurableState(state, 1 << 20, False, KEY))
    snapshot = Snapshot((Gauge("loss", 1.0),), Step(0, 1, 1), RUN)
    first.runs.of(snapshot).route(snapshot, None)
    os.close(first.durable._lock_fd)  # killed

    def cannot_start(experiment: str, trial: str) -> list[InMemorySink]:
        raise SinksFailed("sink tensorboard failed to start: PermissionError")

    second = Pipeline([], cannot_start, LimitsConfig())
    second.recover(DurableState(state, 1 << 20, False, KEY))  # the run is not replayed yet
    second.shutdown(10)
    assert list(state.glob("runs/*/memory/*.seg"))  # kept for a collector that can open it
    stuck.release.set()


def test_a_record_changed_on_disk_is_counted_logged_once_and_never_replayed(tmp_path, caplog):
    """A record whose bytes changed after it was written (a loss of 2.5 read back as 7.5,
    still valid JSON) fails its CRC: the second process replays every other step, never it."""
    state = tmp_path / "state"
    stuck = Stuck()
    limits = LimitsConfig(sink_timeout_s=60.0)
    first = Pipeline([], lambda experiment, trial: [stuck], limits)
    first.recover(DurableState(state, 1 << 20, False, KEY))
    for step in (1, 2, 3):
        snapshot = Snapshot((Gauge("loss", step + 0.5),), Step(0, step, step), RUN)
        first.runs.of(snapshot).route(snapshot, None)
    first.durable.sync()
    os.close(first.durable._lock_fd)  # killed before its sink held anything
    (segment,) = state.glob("runs/*/memory/*.seg")
    data = segment.read_bytes()
    assert data.count(b"2.5") == 1
    segment.write_bytes(data.replace(b"2.5", b"7.5"))

    got: list[InMemorySink] = []
    second = Pipeline([], lambda experiment, trial: got.append(InMemorySink()) or got, limits)
    second.recover(DurableState(state, 1 << 20, False, KEY))
    assert second.force_flush(30)
    assert [(s.step.global_step, s.flat()["loss"]) for s in got[0].snapshots] == [
        (1, 1.5),
        (3, 3.5),
    ]
    skipped = [r.getMessage() for r in caplog.records if "entries skipped" in r.getMessage()]
    assert skipped == [f"durable queue {segment.parent}: 1 torn or corrupt entries skipped"]
    second.shutdown(30)
    stuck.release.set()
