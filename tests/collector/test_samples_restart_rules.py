"""The rules that keep a restarted collector's samples once per step and stream: replayed
waiting samples take the next trainer step in the journal's order, and the samples sinks
skip a (step, stream) they already hold (on disk or written by this process)."""

from __future__ import annotations

import json

import pytest

from collector.run_samples import RunSamples
from collector.signal_journal import SignalJournal, replaying
from exporters.base import ExportResult
from exporters.samples_file import SamplesFileSink
from telemetry.model.sample import Sample
from telemetry.model.snapshot import Snapshot, Step
from tests.collector.test_samples import CONFIG, RUN, completions, sent


def rows(tag: str, step: int, n: int = 2) -> tuple[Sample, ...]:
    return tuple(
        Sample("rollout", (("completion", f"{tag}{step}.{i}"),), (("reward", float(i)),))
        for i in range(n)
    )


def add(run: RunSamples, stream: str, step: int, tag: str, replayed: bool) -> list[Snapshot]:
    out = []
    for received in sent(stream, step, rows(tag, step), worker=tag):
        out.extend(run.add(received, replayed))
    return out


def test_replayed_waiting_samples_belong_to_the_trainer_step_after_them_in_the_journal():
    run = RunSamples(CONFIG, RUN, train=Step(0, 2, 2), seed=0)  # the merger's restored step
    add(run, "rollout", 2, "w", replayed=True)  # released at step 2 before the crash
    add(run, "train", 2, "t", replayed=True)
    (at_2,) = run.close_step(2)  # again at step 2 (the sinks skip it), not at step 3
    assert at_2.step.global_step == 2
    assert sorted(completions([at_2])) == ["t2.0", "t2.1", "w2.0", "w2.1"]
    add(run, "rollout", 3, "w", replayed=True)  # waiting at the crash, before step 3
    assert run.on_train(Step(0, 3, 3)) == []  # the trainer's step 3 comes after the restart
    add(run, "train", 3, "t", replayed=False)
    (at_3,) = run.close_step(3)
    assert sorted(completions([at_3])) == ["t3.0", "t3.1", "w3.0", "w3.1"]


def test_replayed_waiting_samples_go_with_a_live_trainer_step_already_routed():
    """Killed between the trainer's step (routed) and its samples: the replayed workers'
    samples belong to that step, which the trainer's samples close after the restart."""
    run = RunSamples(CONFIG, RUN, train=Step(0, 4, 4), seed=0)
    add(run, "rollout", 4, "w", replayed=True)
    add(run, "train", 4, "t", replayed=False)
    (at_4,) = run.close_step(4)
    assert sorted(completions([at_4])) == ["t4.0", "t4.1", "w4.0", "w4.1"]


def test_live_waiting_samples_after_a_routed_step_wait_for_the_next_one():
    run = RunSamples(CONFIG, RUN, train=Step(0, 4, 4), seed=0)
    add(run, "rollout", 4, "w", replayed=False)  # came after step 4 was routed: step 5's
    add(run, "train", 4, "t", replayed=False)
    (at_4,) = run.close_step(4)
    assert completions([at_4]) == ["t4.0", "t4.1"]
    assert run.holding


def test_the_journal_tells_its_consumer_when_it_replays(tmp_path):
    seen: list[bool] = []
    journal = SignalJournal(tmp_path, "logs", 1 << 20, False, lambda: False)
    journal.accept(b"request", lambda: seen.append(replaying()))
    journal.close(flushed=False)  # killed: the request stays unacknowledged
    again = SignalJournal(tmp_path, "logs", 1 << 20, False, lambda: True)
    assert again.replay(lambda data: seen.append(replaying())) == 1
    again.close(flushed=True)
    assert seen == [False, True] and not replaying()


TORN = '{"step": 9, "str'


def snapshot(step: int, *streams: str) -> Snapshot:
    samples = tuple(
        Sample(stream, (("completion", f"{stream}{step}"),), (("reward", 1.0),))
        for stream in streams
    )
    return Snapshot((), Step(0, step, step), stream="samples", samples=samples)


def lines(path) -> list[tuple[int, str]]:
    """Each line's (step, stream); a torn line (on its own line) is skipped."""
    out = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            assert line == TORN
            continue
        out.append((row["step"], row["stream"]))
    return out


@pytest.mark.parametrize("torn", [False, True])
def test_the_samples_file_skips_a_step_and_stream_it_holds(tmp_path, torn):
    first = SamplesFileSink(tmp_path)
    assert first.export(snapshot(1, "rollout")) is ExportResult.SUCCESS
    first.shutdown()  # the collector is killed here
    if torn:  # mid-line: the torn line is left out of what the file holds
        with first.path.open("a") as f:
            f.write(TORN)
    second = SamplesFileSink(tmp_path)
    second.skip_held_steps()
    for step, streams in [(1, ("rollout", "eval")), (2, ("rollout",)), (2, ("rollout",))]:
        assert second.export(snapshot(step, *streams)) is ExportResult.SUCCESS
    second.shutdown()
    assert lines(second.path) == [(1, "rollout"), (1, "eval"), (2, "rollout")]
    third = SamplesFileSink(tmp_path)  # without skip_held_steps (a training process)
    third.export(snapshot(2, "rollout"))
    third.shutdown()
    assert lines(third.path).count((2, "rollout")) == 2


def test_tensorboard_skips_a_step_of_samples_it_wrote_itself(tmp_path):
    """The sinks' journal and the logs journal may both replay a step in one process."""
    pytest.importorskip("tensorboard")
    from tests.exporters.test_tensorboard import make_sink
    from tests.telemetry.test_samples_trackers import tensorboard_rows

    sink = make_sink(tmp_path)
    sink.skip_held_steps()
    for step, streams in [(1, ("rollout",)), (1, ("rollout", "eval-rollout")), (2, ("rollout",))]:
        assert sink.export(snapshot(step, *streams)) is ExportResult.SUCCESS
    sink.shutdown()
    got = sorted((row["step"], row["stream"]) for row in tensorboard_rows(tmp_path))
    assert got == [(1, "eval-rollout"), (1, "rollout"), (2, "rollout")]


def test_wandb_skips_a_step_of_samples_it_logged_itself(tmp_path):
    pytest.importorskip("wandb")
    from exporters.wandb import WandbSink
    from tests.exporters.test_wandb import history, make_config, read_records

    sink = WandbSink(make_config(tmp_path))
    sink.skip_held_steps()
    for step in (1, 1, 2):
        assert sink.export(snapshot(step, "rollout")) is ExportResult.SUCCESS
    sink.shutdown()
    items = history(read_records(sink))
    assert [item["samples/step"] for item in items if "samples/rollout.path" in item] == [1, 2]


def test_a_samples_file_that_cannot_be_read_is_logged_not_raised(tmp_path, caplog):
    (tmp_path / "samples.jsonl").mkdir()  # reading it fails (the run's other sinks start)
    sink = SamplesFileSink(tmp_path)
    sink.skip_held_steps()
    assert "samples: cannot read" in caplog.text
    sink.shutdown()
