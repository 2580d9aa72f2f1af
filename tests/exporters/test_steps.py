from exporters.steps import StreamSteps
from telemetry.model.snapshot import Snapshot, Step


def test_global_step_wins_and_stepless_streams_count_separately():
    steps = StreamSteps()
    rollout = Snapshot((), None, (), 0, "rollout")
    evaluation = Snapshot((), None, (), 0, "eval")
    train = Snapshot((), Step(0, 3, 17), (), 0, "train")
    seen = [steps.step_of(s) for s in (rollout, train, rollout, evaluation, rollout)]
    assert seen == [0, 17, 1, 0, 2]
