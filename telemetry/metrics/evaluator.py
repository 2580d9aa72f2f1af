"""Evaluation scheduling: AReaL's evaluator, triggered by epochs, steps or seconds.

    evaluator = Evaluator(config.evaluator, ft_spec)     # AReaL's call, as in its trainers
    for epoch ...:
        for epoch_step ...:
            train_step()
            evaluator.evaluate(run_eval, epoch, epoch_step, global_step)

The schedule is AReaL's ``EpochStepTimeFreqCtl``: three independent clocks (finished epochs,
steps, seconds), each restarting only when it fires itself, and ``eval_before_train`` due at
the first ``evaluate()`` call. ``state_dict()``/``load_state_dict()`` resume it exactly
(AReaL's own state dicts load too). ``run_eval`` records its metrics as usual
(``stats_tracker.get("eval-rollout")``); each evaluation's wall time goes to ``timeperf/eval``.

The two extension points of AReaL's evaluation guide: the schedule is any
:class:`FreqCtl` (``Evaluator(..., freq_ctl=...)``), e.g. the built-in
:class:`AdaptiveFrequencyControl`, which evaluates more often while the watched metric
(``run_eval``'s return value) stops improving; and ``evaluate(..., version=v)`` keeps
results by checkpoint version, so one checkpoint is evaluated once (hits and misses
counted in ``cache_hits``/``cache_misses``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config.read import read_section, validate
from telemetry.metrics.eval_schedule import (
    FreqCtl,
    FrequencyControl,
)
from telemetry.model.errors import ConfigError

__all__ = ["Evaluator", "EvaluatorConfig"]


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
FIELDS = ("freq_epochs", "freq_steps", "freq_secs", "eval_before_train")


def _is_section_object(config: Any) -> bool:
    """An object holding the section's four fields as attributes (AReaL's dataclass)."""
    return (
        config is not None
        and not isinstance(config, (Mapping, str, os.PathLike, EvaluatorConfig))
        and not type(config).__module__.startswith("omegaconf")
        and all(hasattr(config, name) for name in FIELDS)
    )


def _read_config(config: Any) -> EvaluatorConfig:
    """The evaluator section from any of AReaL's forms, validated.

    An object with the attributes ``freq_epochs``, ``freq_steps``, ``freq_secs`` and
    ``eval_before_train`` (AReaL's ``EvaluatorConfig``) is read by those four only, as
    AReaL's evaluator reads it (its unset ``experiment_name``/``trial_name``/``fileroot``
    do not matter). Anything else is read as in :func:`telemetry.config.read.read_section`.

    Raises:
        ConfigError: an unknown key or an invalid value, naming it.
    """
    if _is_section_object(config):
        section: Any = {name: getattr(config, name) for name in FIELDS}
    else:
        section, _ = read_section(config, "evaluator")
    return validate(EvaluatorConfig, section, "evaluator", AREAL_IGNORED)


def _steps_per_epoch(ft_spec: Any, steps_per_epoch: Any = None) -> int:
    """Training steps per epoch from AReaL's ``FinetuneSpec`` (its ``steps_per_epoch``) or an int.

    Raises:
        ConfigError: both or neither given, or not an int of at least 1.
    """
    if (ft_spec is None) == (steps_per_epoch is None):
        raise ConfigError("evaluator: pass ft_spec (or steps_per_epoch), exactly one of them")
    value = steps_per_epoch if ft_spec is None else getattr(ft_spec, "steps_per_epoch", ft_spec)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"evaluator: steps_per_epoch must be an int (or ft_spec a FinetuneSpec), got {value!r}"
        )
    if value < 1:
        raise ConfigError(f"evaluator: steps_per_epoch must be >= 1, got {value}")
    return value


class Evaluator:
    """Runs an evaluation function when its schedule says so.

    Args:
        config: an :class:`EvaluatorConfig`, AReaL's ``EvaluatorConfig`` dataclass (any
            object with its four fields) or AReaL's ``evaluator`` section in any other form
            (mapping, YAML path, ``DictConfig``, whole experiment config).
        ft_spec: AReaL's ``FinetuneSpec`` (only its ``steps_per_epoch`` is read) or the
            steps per epoch as an int; an epoch ends after its last step.
        steps_per_epoch: the int, by keyword, instead of ``ft_spec``.
        clock: wall-clock seconds (tests inject one).
        freq_ctl: a schedule of your own instead of the configured frequencies.
        group: the process group whose ranks agree on the time clock (None: the default
            group, as AReaL); see :class:`FrequencyControl`.

    Raises:
        ConfigError: an unknown key or an invalid frequency, naming it.
    """

    def __init__(
        self,
        config: EvaluatorConfig | Mapping[str, Any] | Any,
        ft_spec: Any = None,
        *,
        steps_per_epoch: int | None = None,
        clock: Callable[[], float] = time.time,
        freq_ctl: FreqCtl | None = None,
        group: Any = None,
    ) -> None:
        self.config = _read_config(config)
        self.steps_per_epoch = _steps_per_epoch(ft_spec, steps_per_epoch)
        self.runs = 0
        self.cache_hits = self.cache_misses = 0
        self._results: dict[Any, Any] = {}
        if freq_ctl is not None and not isinstance(freq_ctl, FreqCtl):
            raise ConfigError(f"evaluator: freq_ctl needs a check() method, got {freq_ctl!r}")
        cfg = self.config
        self._control = freq_ctl or FrequencyControl(
            cfg.freq_epochs, cfg.freq_steps, cfg.freq_secs, clock, cfg.eval_before_train, group
        )
        # eval_before_train with a schedule of your own: the first evaluate() is due.
        self._initial_due = freq_ctl is not None and cfg.eval_before_train

    def before_train(self, evaluate_fn: Callable[[], Any]) -> bool:
        """Run the ``eval_before_train`` evaluation now, before the first training step.

        AReaL runs it at the first ``evaluate()`` call instead (after the first step); once
        it ran here, that call does not run it again, and the rest of the schedule is
        AReaL's. Does nothing without ``eval_before_train`` or once the evaluation has run.
        True if it ran.
        """
        if isinstance(self._control, FrequencyControl):
            pending = self._control.initial_ran()
        else:
            pending, self._initial_due = self._initial_due, False
        if not pending:
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
        if not self._due(finished_epochs=int(epoch_step == self.steps_per_epoch - 1)):
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

    def state_dict(self) -> dict[str, Any]:
        """The schedule's state, JSON-serializable (AReaL's recover handler writes it)."""
        if isinstance(self._control, FrequencyControl):
            return self._control.state_dict()
        own = getattr(self._control, "state_dict", None)
        return {"initial_due": self._initial_due, "freq_ctl": own() if own else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the schedule of :meth:`state_dict` (or of AReaL's evaluator's)."""
        if isinstance(self._control, FrequencyControl):
            self._control.load_state_dict(state)
            return
        self._initial_due = bool(state["initial_due"])
        load = getattr(self._control, "load_state_dict", None)
        if load is not None and state["freq_ctl"] is not None:
            load(state["freq_ctl"])

    def _due(self, finished_epochs: int) -> bool:
        due = self._control.check(epochs=finished_epochs, steps=1)
        initial, self._initial_due = self._initial_due, False
        return due or initial

    def _run(self, evaluate_fn: Callable[[], Any]) -> Any:
        from telemetry.record import stats_tracker

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
