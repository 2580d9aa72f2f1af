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

The two extension points of AReaL's evaluation guide: the schedule is any
:class:`FreqCtl` (``Evaluator(..., freq_ctl=...)``), e.g. the built-in
:class:`AdaptiveFrequencyControl`, which evaluates more often while the watched metric
(``run_eval``'s return value) stops improving; and ``evaluate(..., version=v)`` keeps
results by checkpoint version, so one checkpoint is evaluated once (hits and misses
counted in ``cache_hits``/``cache_misses``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, StrictBool, StrictFloat, StrictInt
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config_read import read_section, validate
from telemetry.model.errors import ConfigError


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


@runtime_checkable
class FreqCtl(Protocol):
    """When to evaluate: ``check`` is called after every training step."""

    def check(self, epochs: int = 0, steps: int = 0) -> bool:
        """Count ``epochs`` and ``steps`` just finished; True when an evaluation is due."""
        ...


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


class AdaptiveFrequencyControl:
    """Every ``freq_steps`` steps while the watched metric improves; more often when not.

    After each evaluation, :meth:`observe` gets the watched value. An improvement over
    the best so far of at most ``threshold`` (a plateau or a drop) halves the period,
    down to ``min_freq_steps``; an improvement by more than ``threshold`` restores
    ``freq_steps``.

    Raises:
        ConfigError: a period below 1, ``min_freq_steps`` above ``freq_steps``, or a
            negative threshold.
    """

    def __init__(
        self,
        freq_steps: int,
        min_freq_steps: int = 1,
        threshold: float = 0.0,
        higher_is_better: bool = True,
    ) -> None:
        if not 1 <= min_freq_steps <= freq_steps:
            raise ConfigError(
                f"adaptive evaluation: need 1 <= min_freq_steps <= freq_steps, got "
                f"{min_freq_steps} and {freq_steps}"
            )
        if threshold < 0:
            raise ConfigError(f"adaptive evaluation: threshold must be >= 0, got {threshold}")
        self.freq_steps, self.min_freq_steps = freq_steps, min_freq_steps
        self.threshold, self.higher_is_better = threshold, higher_is_better
        self.period = freq_steps
        self.best: float | None = None
        self._steps = 0

    def check(self, epochs: int = 0, steps: int = 0) -> bool:
        """Count ``steps``; True when the current period has elapsed."""
        del epochs
        self._steps += steps
        if self._steps < self.period:
            return False
        self._steps = 0
        return True

    def observe(self, value: float) -> None:
        """The watched metric of the evaluation that just ran (NaN counts as no progress)."""
        signed = value if self.higher_is_better else -value
        if self.best is not None and not signed - self.best > self.threshold:
            self.period = max(self.min_freq_steps, self.period // 2)
        elif self.best is not None:
            self.period = self.freq_steps
        if self.best is None or signed > self.best:
            self.best = signed


class Evaluator:
    """Runs an evaluation function when its schedule says so.

    Args:
        config: an :class:`EvaluatorConfig` or AReaL's ``evaluator`` section in any form
            (mapping, YAML path, ``DictConfig``, dataclass, whole experiment config).
        steps_per_epoch: training steps in one epoch (an epoch ends after its last step).
        clock: seconds, monotonic (tests inject one).
        freq_ctl: a schedule of your own instead of the configured frequencies.

    Raises:
        ConfigError: an unknown key or an invalid frequency, naming it.
    """

    def __init__(
        self,
        config: EvaluatorConfig | Mapping[str, Any] | None,
        steps_per_epoch: int,
        clock: Callable[[], float] = time.monotonic,
        freq_ctl: FreqCtl | None = None,
    ) -> None:
        section, _ = read_section(config, "evaluator")
        self.config = validate(EvaluatorConfig, section, "evaluator", AREAL_IGNORED)
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int):
            raise ConfigError(f"evaluator: steps_per_epoch must be an int, got {steps_per_epoch!r}")
        if steps_per_epoch < 1:
            raise ConfigError(f"evaluator: steps_per_epoch must be >= 1, got {steps_per_epoch}")
        self.steps_per_epoch = steps_per_epoch
        self.runs = 0
        self.cache_hits = self.cache_misses = 0
        self._results: dict[Any, Any] = {}
        if freq_ctl is not None and not isinstance(freq_ctl, FreqCtl):
            raise ConfigError(f"evaluator: freq_ctl needs a check() method, got {freq_ctl!r}")
        self._control = freq_ctl or FrequencyControl(
            self.config.freq_epochs, self.config.freq_steps, self.config.freq_secs, clock
        )

    def before_train(self, evaluate_fn: Callable[[], Any]) -> bool:
        """Evaluate the initial model once if ``eval_before_train``; True if it ran."""
        if not self.config.eval_before_train:
            return False
        self._run(evaluate_fn)
        return True

    def evaluate(
        self,
        evaluate_fn: Callable[[], Any],
        epoch: int,
        epoch_step: int,
        global_step: int,
        version: Any = None,
    ) -> bool:
        """Call after each training step; runs ``evaluate_fn`` when due. True if it ran.

        ``epoch`` and ``global_step`` are accepted for AReaL's signature; the schedule
        counts steps and finished epochs itself. With a checkpoint ``version``, a due
        evaluation of a version already evaluated is skipped (a cache hit; False).
        """
        del epoch, global_step
        finished_epoch = int(epoch_step == self.steps_per_epoch - 1)
        if not self._control.check(epochs=finished_epoch, steps=1):
            return False
        if version is not None and version in self._results:
            self.cache_hits += 1
            self._observe(self._results[version])
            return False
        result = self._run(evaluate_fn)
        if version is not None:
            self.cache_misses += 1
            self._results[version] = result
        return True

    def _run(self, evaluate_fn: Callable[[], Any]) -> Any:
        from telemetry import stats_tracker

        with stats_tracker.record_timing("eval"):
            result = evaluate_fn()
        self.runs += 1
        self._observe(result)
        return result

    def _observe(self, result: Any) -> None:
        observe = getattr(self._control, "observe", None)
        if (
            observe is not None
            and isinstance(result, (int, float))
            and not isinstance(result, bool)
        ):
            observe(float(result))
