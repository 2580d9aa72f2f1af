"""Evaluation scheduling by epochs, steps and seconds, against a hand-written schedule."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from telemetry import stats_tracker
from telemetry.evaluator import Evaluator, FrequencyControl
from telemetry.model.errors import ConfigError


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


def test_every_n_seconds():
    fired, _ = run_schedule({"freq_secs": 5}, epochs=1, steps_per_epoch=6, seconds_per_step=2.0)
    assert fired == [2, 5]  # t=6 >= 5, then t=12-6=6 >= 5


def test_the_clocks_are_independent():
    # AReaL's EpochStepTimeFreqCtl: a clock restarts only when it fires itself.
    fired, _ = run_schedule({"freq_steps": 3, "freq_epochs": 1}, epochs=3, steps_per_epoch=4)
    assert fired == [2, 3, 5, 7, 8, 11]  # steps 2, 5, 8, 11; epochs end at 3, 7, 11
    fired, _ = run_schedule(
        {"freq_secs": 10, "freq_steps": 4}, epochs=1, steps_per_epoch=12, seconds_per_step=2.0
    )
    assert fired == [3, 4, 7, 9, 11]  # steps 3, 7, 11; t=10 at step 4, t=20 at step 9


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
    with pytest.raises(ConfigError, match="steps_per_epoch must be an int"):
        Evaluator({}, SimpleNamespace(total_train_epochs=1))
    with pytest.raises(ConfigError, match="exactly one"):
        Evaluator({}, 4, steps_per_epoch=4)


def test_adaptive_control_evaluates_more_often_on_a_plateau_and_backs_off_on_progress():
    from telemetry.evaluator import AdaptiveFrequencyControl

    control = AdaptiveFrequencyControl(freq_steps=8, min_freq_steps=2, threshold=0.01)
    rewards = iter([0.10, 0.20, 0.205, 0.21, 0.30, 0.30])  # returned by each evaluation
    evaluator = Evaluator({}, steps_per_epoch=1000, freq_ctl=control)
    fired, periods = [], []
    for step in range(40):
        if evaluator.evaluate(lambda: next(rewards), 0, step, step):
            fired.append(step)
            periods.append(control.period)
    # 0.10 first; +0.10 improves (8); +0.005 and +0.005 are at most 0.01: 4, then 2;
    # +0.09 (over the best, 0.21) restores 8; equal to the best is a plateau: 4.
    assert periods == [8, 8, 4, 2, 8, 4]
    assert fired == [7, 15, 23, 27, 29, 37]


def test_adaptive_control_threshold_is_strict_and_nan_counts_as_no_progress():
    from telemetry.evaluator import AdaptiveFrequencyControl

    control = AdaptiveFrequencyControl(freq_steps=8, min_freq_steps=1, threshold=0.5)
    control.observe(1.0)
    control.observe(1.5)  # exactly the threshold: not more than it
    assert control.period == 4
    control.observe(2.0 + 1e-9)  # just above
    assert control.period == 8
    control.observe(float("nan"))
    assert control.period == 4 and control.best == 2.0 + 1e-9
    lower = AdaptiveFrequencyControl(freq_steps=4, threshold=0.0, higher_is_better=False)
    lower.observe(1.0)
    lower.observe(0.5)  # a loss going down improves
    assert lower.period == 4
    with pytest.raises(ConfigError, match="min_freq_steps <= freq_steps"):
        AdaptiveFrequencyControl(freq_steps=2, min_freq_steps=3)


def test_results_are_cached_by_checkpoint_version():
    calls = []
    evaluator = Evaluator({"freq_steps": 1}, steps_per_epoch=100)

    def run_eval():
        calls.append(len(calls))
        return 0.5

    versions = [0, 0, 1, 1, 1, 2]  # the checkpoint each step would evaluate
    ran = [evaluator.evaluate(run_eval, 0, i, i, version=v) for i, v in enumerate(versions)]
    assert ran == [True, False, True, False, False, True]
    assert len(calls) == 3 and (evaluator.cache_misses, evaluator.cache_hits) == (3, 3)
    assert evaluator.evaluate(run_eval, 0, 6, 6) and len(calls) == 4  # no version: no cache


def test_a_schedule_without_check_is_refused():
    with pytest.raises(ConfigError, match="freq_ctl needs a check"):
        Evaluator({}, steps_per_epoch=10, freq_ctl=object())


def test_areals_config_object_and_finetune_spec():
    # AReaL's call: Evaluator(config.evaluator, ft_spec); only the four fields are read, so
    # an unset experiment_name ("???", omegaconf's MISSING) does not matter, as in AReaL.
    section = SimpleNamespace(
        experiment_name="???", freq_epochs=None, freq_steps=2, freq_secs=None,
        eval_before_train=False,
    )  # fmt: skip
    ft_spec = SimpleNamespace(steps_per_epoch=4, total_train_epochs=1)
    evaluator = Evaluator(section, ft_spec)
    assert (evaluator.config.freq_steps, evaluator.steps_per_epoch) == (2, 4)
    assert Evaluator(section, 4).steps_per_epoch == 4  # rltel's int form, positional
    section.freq_steps = 0
    with pytest.raises(ConfigError, match=r"evaluator\.freq_steps must be greater than 0"):
        Evaluator(section, ft_spec)


def test_eval_before_train_is_due_at_the_first_evaluate_call():
    clock = FakeClock()
    evaluator = Evaluator({"eval_before_train": True, "freq_steps": 3}, 4, clock=clock)
    ran = [g for g in range(8) if evaluator.evaluate(lambda: None, g // 4, g % 4, g)]
    assert ran == [0, 2, 5]  # AReaL's: the initial evaluation after the first step


def test_before_train_moves_the_initial_evaluation_and_never_doubles_it():
    fired, evaluator = run_schedule(
        {"eval_before_train": True, "freq_steps": 3}, epochs=2, steps_per_epoch=4
    )
    assert fired == ["before", 2, 5]  # AReaL: 0, 2, 5 (the same schedule after it)
    assert not evaluator.before_train(lambda: None)  # once only
    evaluator = Evaluator({"eval_before_train": True}, 4)
    assert evaluator.evaluate(lambda: None, 0, 0, 0)
    assert not evaluator.before_train(lambda: None)  # the first evaluate() ran it
    assert not Evaluator({}, 4).before_train(lambda: None)  # no eval_before_train


def test_before_train_keeps_areals_epoch_restart():
    # AReaL's initial evaluation restarts the epoch clock at the first call: with one step
    # per epoch and freq_epochs=2 it fires at 0, 2, 4 (not 0, 1, 3). before_train() moves
    # the one at 0 and keeps 2, 4.
    fired, _ = run_schedule(
        {"eval_before_train": True, "freq_epochs": 2}, epochs=5, steps_per_epoch=1
    )
    assert fired == ["before", 2, 4]


def _run_with_resume(config: dict, steps: int, save_after: int | None) -> list[int]:
    """Steps whose evaluation ran; with ``save_after``, a new evaluator goes on from the
    JSON state written after that step's evaluation."""
    clock = FakeClock()
    evaluator = Evaluator(config, 4, clock=clock)
    fired = []
    for g in range(steps):
        clock.now += 1.5
        if evaluator.evaluate(lambda: None, g // 4, g % 4, g):
            fired.append(g)
        if g == save_after:
            state = json.loads(json.dumps(evaluator.state_dict()))
            evaluator = Evaluator(config, 4, clock=clock)
            evaluator.load_state_dict(state)
    return fired


@pytest.mark.parametrize(
    "config",
    [
        {"freq_steps": 3, "freq_epochs": 1, "freq_secs": 4, "eval_before_train": True},
        {"freq_epochs": 2, "eval_before_train": True},
        {"freq_secs": 5},
    ],
)
def test_a_resumed_schedule_continues_exactly(config):
    whole = _run_with_resume(config, steps=16, save_after=None)
    assert len(whole) >= 3
    for save_after in range(16):
        assert _run_with_resume(config, 16, save_after) == whole, save_after


def test_a_resumed_time_clock_counts_the_downtime():
    clock = FakeClock()
    evaluator = Evaluator({"freq_secs": 10}, 4, clock=clock)
    clock.now = 4.0
    assert not evaluator.evaluate(lambda: None, 0, 0, 0)
    state = json.loads(json.dumps(evaluator.state_dict()))
    clock.now = 100.0  # the run was down for a while
    resumed = Evaluator({"freq_secs": 10}, 4, clock=clock)
    resumed.load_state_dict(state)
    assert resumed.evaluate(lambda: None, 0, 1, 1)  # as AReaL: wall time since the last one


def test_a_state_of_neither_format_is_refused():
    with pytest.raises(ConfigError, match="expected rltel's or AReaL's state_dict"):
        Evaluator({}, 4).load_state_dict({"steps": 3})


def test_eval_before_train_with_a_schedule_of_your_own():
    from telemetry.evaluator import AdaptiveFrequencyControl

    evaluator = Evaluator(
        {"eval_before_train": True}, 100, freq_ctl=AdaptiveFrequencyControl(freq_steps=3)
    )
    ran = [g for g in range(6) if evaluator.evaluate(lambda: None, 0, g, g)]
    assert ran == [0, 2, 5]  # the first call, then the schedule's own periods
    evaluator = Evaluator(
        {"eval_before_train": True}, 100, freq_ctl=AdaptiveFrequencyControl(freq_steps=3)
    )
    assert evaluator.before_train(lambda: None)
    state = json.loads(json.dumps(evaluator.state_dict()))
    assert state == {"initial_due": False, "freq_ctl": None}
    evaluator.load_state_dict({"initial_due": True, "freq_ctl": None})
    assert evaluator.evaluate(lambda: None, 0, 0, 0)
