"""Evaluation scheduling: AReaL's evaluator, triggered by epochs, steps or seconds.

    evaluator = Evaluator({"freq_steps": 100, "freq_secs": 3600, "eval_before_train": True},
                          steps_per_epoch=len(dataloader))
    evaluator.before_train(run_eval)                      # once, if eval_before_train
    for epoch ...:
        for epoch_step ...:
            train_step()
            evaluator.evaluate(run_eval, epoch, epoch_step, global_step)

``run_eval`` records its metrics as usual (``stats_tracker.get("eval-rollout")``); each
evaluation's wall time goes to ``timeperf/eval`` so it shows beside the other timings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config_read import read_section, validate
from telemetry.errors import ConfigError


@dataclass(frozen=True, config=SCHEMA)
class EvaluatorConfig:
    """When to evaluate: every ``freq_epochs`` epochs, ``freq_steps`` steps or ``freq_secs``.

    AReaL's ``evaluator`` section also has ``experiment_name``, ``trial_name`` and
    ``fileroot`` (rltel does not use them): accepted with one warning.
    """

    freq_epochs: StrictInt | None = Field(default=None, gt=0)
    freq_steps: StrictInt | None = Field(default=None, gt=0)
    freq_secs: StrictFloat | None = Field(default=None, gt=0)
    eval_before_train: StrictBool = False


AREAL_IGNORED = {"": frozenset({"experiment_name", "trial_name", "fileroot"})}


class FrequencyControl:
    """AReaL's ``EpochStepTimeFreqCtl``: fires when any configured period has elapsed.

    ``check(epochs, steps)`` adds the finished epochs and steps to the counters; when a
    period is reached, all counters restart (a fired evaluation resets every clock).
    """

    def __init__(
        self,
        freq_epochs: int | None = None,
        freq_steps: int | None = None,
        freq_secs: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.freq_epochs, self.freq_steps, self.freq_secs = freq_epochs, freq_steps, freq_secs
        self._clock = clock
        self._epochs = 0
        self._steps = 0
        self._since = clock()

    def check(self, epochs: int = 0, steps: int = 0) -> bool:
        """Count ``epochs`` and ``steps`` just finished; True when an evaluation is due."""
        self._epochs += epochs
        self._steps += steps
        now = self._clock()
        due = (
            (self.freq_epochs is not None and self._epochs >= self.freq_epochs)
            or (self.freq_steps is not None and self._steps >= self.freq_steps)
            or (self.freq_secs is not None and now - self._since >= self.freq_secs)
        )
        if due:
            self._epochs = self._steps = 0
            self._since = now
        return due


class Evaluator:
    """Runs an evaluation function when its schedule says so.

    Args:
        config: an :class:`EvaluatorConfig` or AReaL's ``evaluator`` section in any form
            (mapping, YAML path, ``DictConfig``, dataclass, whole experiment config).
        steps_per_epoch: training steps in one epoch (an epoch ends after its last step).
        clock: seconds, monotonic (tests inject one).

    Raises:
        ConfigError: an unknown key or an invalid frequency, naming it.
    """

    def __init__(
        self,
        config: EvaluatorConfig | Mapping[str, Any] | None,
        steps_per_epoch: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        section, _ = read_section(config, "evaluator")
        self.config = validate(EvaluatorConfig, section, "evaluator", AREAL_IGNORED)
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int):
            raise ConfigError(f"evaluator: steps_per_epoch must be an int, got {steps_per_epoch!r}")
        if steps_per_epoch < 1:
            raise ConfigError(f"evaluator: steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.steps_per_epoch = steps_per_epoch
        self.runs = 0
        self._control = FrequencyControl(
            self.config.freq_epochs, self.config.freq_steps, self.config.freq_secs, clock
        )

    def before_train(self, evaluate_fn: Callable[[], Any]) -> bool:
        """Evaluate the initial model once if ``eval_before_train``; True if it ran."""
        if not self.config.eval_before_train:
            return False
        self._run(evaluate_fn)
        return True

    def evaluate(
        self, evaluate_fn: Callable[[], Any], epoch: int, epoch_step: int, global_step: int
    ) -> bool:
        """Call after each training step; runs ``evaluate_fn`` when due. True if it ran.

        ``epoch`` and ``global_step`` are accepted for AReaL's signature; the schedule
        counts steps and finished epochs itself.
        """
        del epoch, global_step
        finished_epoch = int(epoch_step == self.steps_per_epoch - 1)
        if not self._control.check(epochs=finished_epoch, steps=1):
            return False
        self._run(evaluate_fn)
        return True

    def _run(self, evaluate_fn: Callable[[], Any]) -> None:
        from telemetry import stats_tracker

        with stats_tracker.record_timing("eval"):
            evaluate_fn()
        self.runs += 1
