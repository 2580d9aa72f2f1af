"""The collector's state directory: one collector at a time, removed once everything is held,
and a pipeline that replays a stored run's journals before any request."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading

import pytest
from grpc import StatusCode

from collector.baselines import DIRECTORY as BASELINES
from collector.config import LimitsConfig
from collector.durable import MERGE, DurableState
from collector.merge import RolloutMerger
from collector.pipeline import Pipeline
from collector.refusals import Refused
from exporters.base import ExportResult, InMemorySink
from exporters.fanout import FanOut
from exporters.journal import Journal
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.decode import Decoder

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
        why = "sink tensorboard failed to start: PermissionError"
        raise Refused(StatusCode.UNAVAILABLE, why, retry=True)

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


def test_missing_parents_of_the_directory_are_created(tmp_path):
    state = DurableState(tmp_path / "a" / "b" / "state", 1 << 20, False, KEY)
    assert (tmp_path / "a" / "b" / "state" / "lock").is_file()
    state.close()


def test_the_lock_file_is_read_write_for_its_owner_and_read_only_for_others(tmp_path):
    umask = os.umask(0o022)
    try:
        state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "state" / "lock").stat().st_mode) == 0o644
    state.close()


def test_an_unusable_baselines_directory_is_a_config_error_naming_the_key(tmp_path):
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    (tmp_path / "state" / BASELINES).write_text("a file, not a directory")
    with pytest.raises(ConfigError, match=f"{KEY}: "):
        state.attach_decoder(Decoder())
    state.close()


def test_a_journal_of_a_running_sink_is_replayed_without_a_warning(tmp_path, caplog):
    """An earlier process's journal of a sink this collector still runs is no stray one."""
    held = Journal(tmp_path / "state" / "shared" / "memory", 1 << 20, False)
    held.append(Snapshot((Gauge("loss", 1.0),), Step(0, 1, 1), RUN))
    held.close()
    (tmp_path / "state" / "shared" / "empty").mkdir()  # holds nothing: not named either
    sink = InMemorySink()
    pipeline = Pipeline([sink], None, LimitsConfig())
    pipeline.recover(DurableState(tmp_path / "state", 1 << 20, False, KEY))
    assert pipeline.force_flush(30)
    assert [s.step.global_step for s in sink.snapshots] == [1]
    pipeline.shutdown(30)
    assert "no sink of this collector" not in caplog.text


def test_a_runs_journal_of_waiting_windows_is_taken_up_without_a_warning(tmp_path, caplog):
    state = tmp_path / "state"
    first = Pipeline([], lambda experiment, trial: [InMemorySink()], LimitsConfig())
    first.recover(DurableState(state, 1 << 20, False, KEY))
    resource = (*RUN, ("rltel.role", "rollout"), ("rltel.worker_id", "w0"))
    window = Snapshot((Gauge("rollout/reward", 1.0),), None, resource, 1, "rollout")
    first.runs.of(window).route(window, None)
    first.durable.sync()
    os.close(first.durable._lock_fd)  # killed while the window waits for its step
    assert list(state.glob(f"runs/*/{MERGE}/*.seg"))

    second = Pipeline([], lambda experiment, trial: [InMemorySink()], LimitsConfig())
    second.recover(DurableState(state, 1 << 20, False, KEY))
    assert "no sink of this collector" not in caplog.text
    second.shutdown(30)


def test_unreadable_run_markers_are_logged_and_skipped(tmp_path, caplog):
    runs = tmp_path / "state" / "runs"
    (runs / "a" / "run.json").mkdir(parents=True)  # OSError
    (runs / "b").mkdir()
    (runs / "b" / "run.json").write_text("{not json")  # ValueError
    (runs / "c").mkdir()
    (runs / "c" / "run.json").write_text(json.dumps({"experiment": "e"}))  # KeyError
    (runs / "d").mkdir()
    (runs / "d" / "run.json").write_text(json.dumps({"experiment": "e", "trial": "t"}))
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    assert state.stored_runs() == [("e", "t")]
    unreadable = [r.getMessage() for r in caplog.records if "unreadable" in r.getMessage()]
    assert [m.split(": ")[1] for m in unreadable] == [
        f"{runs / name / 'run.json'} unreadable" for name in "abc"
    ]
    state.close()


def test_sync_raises_a_journal_write_that_failed(tmp_path):
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    merger = RolloutMerger()
    state.attach_run(("e", "t"), FanOut([]), merger)
    assert merger.journal is not None
    shutil.rmtree(merger.journal.directory)  # its disk went away
    assert merger.journal.append(Snapshot((Gauge("loss", 1.0),), Step(0, 1, 1), RUN)) is None
    with pytest.raises(FileNotFoundError):
        state.sync()
    state.close()


def test_close_empties_every_acknowledged_journal_and_removes_the_directory(tmp_path):
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    merger = RolloutMerger()
    state.attach_run(("e", "t"), FanOut([]), merger)
    assert merger.journal is not None
    merger.journal.append(Snapshot((Gauge("loss", 1.0),), Step(0, 1, 1), RUN))
    merger.journal.ack(merger.journal.last_seq)  # held: the open segment stays until close
    assert list((tmp_path / "state").rglob("*.seg"))
    state.close()
    assert not (tmp_path / "state").exists()


def test_a_second_close_leaves_the_next_collectors_lock_alone(tmp_path):
    first = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    first.close()
    second = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    first.close()
    with pytest.raises(ConfigError, match="held by another running collector"):
        DurableState(tmp_path / "state", 1 << 20, False, KEY)
    second.close()


def test_close_removes_the_directory_when_its_lock_file_was_deleted(tmp_path):
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    (tmp_path / "state" / "lock").unlink()  # a /tmp cleaner, say
    state.close()
    assert not (tmp_path / "state").exists()


def test_a_runs_directory_name_is_the_same_in_every_version(tmp_path):
    """The name is recomputed from run.json at each start: a changed rule would leave an
    earlier version's journals unread. Long names are cut at 80 characters plus a digest."""
    state = DurableState(tmp_path / "state", 1 << 20, False, KEY)
    state.attach_run(("x" * 100, "trial/1"), FanOut([]), RolloutMerger())
    (run,) = (tmp_path / "state" / "runs").iterdir()
    assert run.name == "x" * 80 + "-6b144eea1171"
    state.close()
