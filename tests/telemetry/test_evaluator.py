"""Evaluation scheduling by epochs, steps and seconds, against a hand-written schedule."""

from __future__ import annotations

import pytest

from telemetry import stats_tracker
from telemetry.errors import ConfigError
from telemetry.evaluator import Evaluator, FrequencyControl


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_schedule(config: dict, epochs: int, steps_per_epoch: int, seconds_per_step=0.0):
    clock = FakeClock()
    evaluator = Evaluator(config, steps_per_epoch, clock=clock)
    fired = []
    evaluator.before_train(lambda: fired.append("before"))
    global_step = 0
    for epoch in range(epochs):
        for epoch_step in range(steps_per_epoch):
            clock.now += seconds_per_step
            if evaluator.evaluate(lambda: None, epoch, epoch_step, global_step):
                fired.append(global_step)
            global_step += 1
    return fired, evaluator


def test_every_n_steps():
    fired, evaluator = run_schedule({"freq_steps": 3}, epochs=2, steps_per_epoch=4)
    assert fired == [2, 5]
    assert evaluator.runs == 2


def test_every_epoch_fires_after_the_last_step_of_each_epoch():
    fired, _ = run_schedule({"freq_epochs": 1}, epochs=3, steps_per_epoch=4)
    assert fired == [3, 7, 11]


def test_every_n_seconds_and_counters_restart_when_any_period_fires():
    fired, _ = run_schedule(
        {"freq_secs": 10, "freq_steps": 4}, epochs=1, steps_per_epoch=12, seconds_per_step=3.0
    )
    # steps reach 4 at step 3 (t=12 also >= 10); then t restarts: step 7 (4 steps, t=12)...
    assert fired == [3, 7, 11]
    fired, _ = run_schedule({"freq_secs": 5}, epochs=1, steps_per_epoch=6, seconds_per_step=2.0)
    assert fired == [2, 5]  # t=6 >= 5, then t=12-6=6 >= 5


def test_eval_before_train_and_timing_key():
    stats_tracker.export_all()
    fired, _ = run_schedule({"eval_before_train": True}, epochs=1, steps_per_epoch=3)
    assert fired == ["before"]  # no frequency configured: only the initial evaluation
    stats = stats_tracker.export_all()
    assert stats["timeperf/eval__count"] == 1
    assert stats["timeperf/eval"] >= 0.0


def test_frequency_control_without_periods_never_fires():
    control = FrequencyControl()
    assert not any(control.check(epochs=1, steps=1) for _ in range(100))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"freq_step": 1}, "unknown key evaluator.freq_step"),
        ({"freq_steps": 0}, r"evaluator\.freq_steps must be greater than 0, got 0$"),
        ({"freq_epochs": 1.5}, r"evaluator\.freq_epochs must be a valid integer, got 1\.5$"),
        ({"freq_secs": "1h"}, r"evaluator\.freq_secs must be a valid number, got '1h'$"),
        ({"freq_steps": True}, r"evaluator\.freq_steps must be a valid integer, got True$"),
    ],
)
def test_bad_config_names_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        Evaluator(config, steps_per_epoch=4)
    with pytest.raises(ConfigError, match="steps_per_epoch"):
        Evaluator({}, steps_per_epoch=0)
