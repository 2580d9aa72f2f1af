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

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, StrictBool, StrictFloat, StrictInt
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config.read import read_section, validate
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
FIELDS = ("freq_epochs", "freq_steps", "freq_secs", "eval_before_train")
STATE_FORMAT = "rltel.evaluator/1"


@runtime_checkable
class FreqCtl(Protocol):
    """When to evaluate: ``check`` is called after every training step."""

    def check(self, epochs: int = 0, steps: int = 0) -> bool:
        """Count ``epochs`` and ``steps`` just finished; True when an evaluation is due."""
        ...


@dataclasses.dataclass
class _Counter:
    """Counts epochs or steps; fires when ``period`` more were counted since it last fired."""

    period: int | None
    total: int = 0
    last: int = 0

    def count(self, n: int) -> bool:
        """Count ``n``; True (and restart) when the period has elapsed."""
        self.total += n
        if self.period is None or self.total - self.last < self.period:
            return False
        self.last = self.total
        return True

    def restart(self, n: int) -> None:
        """Count ``n`` and restart the period from here (AReaL's ``initial_value`` call)."""
        self.total += n
        self.last = self.total


class FrequencyControl:
    """AReaL's ``EpochStepTimeFreqCtl``: fires when any clock's period has elapsed.

    The epoch, step and time clocks are independent: each restarts only when it fires
    itself. With ``eval_before_train``, the first ``check`` is due whatever the periods and
    restarts the epoch clock (AReaL's ``initial_value`` on its epoch clock); the step and
    time clocks count it as usual.

    Time is ``clock()`` seconds on the wall clock by default (AReaL reads ``datetime.now()``),
    so a resumed run counts the time it was down, as AReaL does. Under an initialized
    ``torch.distributed`` process group the elapsed time is the maximum over the ranks of
    ``group`` (the default group for None), so every rank fires together, as in AReaL: every
    rank must then call ``check`` at every step when ``freq_secs`` is set.
    """

    def __init__(
        self,
        freq_epochs: int | None = None,
        freq_steps: int | None = None,
        freq_secs: float | None = None,
        clock: Callable[[], float] = time.time,
        eval_before_train: bool = False,
        group: Any = None,
    ) -> None:
        self.freq_secs = freq_secs
        self._epochs = _Counter(freq_epochs)
        self._steps = _Counter(freq_steps)
        self._clock = clock
        self._group = group
        self._last_time = clock()
        self._restart_epochs = eval_before_train
        self._initial_due = eval_before_train

    def check(self, epochs: int = 0, steps: int = 0) -> bool:
        """Count ``epochs`` and ``steps`` just finished; True when an evaluation is due."""
        initial = self._initial_due
        if self._restart_epochs:
            self._epochs.restart(epochs)
            by_epochs = False
        else:
            by_epochs = self._epochs.count(epochs)
        self._restart_epochs = self._initial_due = False
        by_steps = self._steps.count(steps)
        by_time = self._time_due()
        return initial or by_epochs or by_steps or by_time

    def initial_ran(self) -> bool:
        """The ``eval_before_train`` evaluation ran already: the first ``check`` is not due
        for it (it still restarts the epoch clock). True if that evaluation was pending."""
        pending, self._initial_due = self._initial_due, False
        return pending

    def _time_due(self) -> bool:
        if self.freq_secs is None:
            return False
        now = self._clock()
        if _max_over_ranks(now - self._last_time, self._group) < self.freq_secs:
            return False
        self._last_time = now
        return True

    def state_dict(self) -> dict[str, Any]:
        """The clocks' state, JSON-serializable (AReaL writes it to ``evaluator_info.json``)."""
        return {
            "format": STATE_FORMAT,
            "epochs": [self._epochs.total, self._epochs.last],
            "steps": [self._steps.total, self._steps.last],
            "last_time": self._last_time,
            "restart_epochs": self._restart_epochs,
            "initial_due": self._initial_due,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: rltel's :meth:`state_dict` or AReaL's
        ``EpochStepTimeFreqCtl.state_dict()``. The periods stay this control's own.

        Raises:
            ConfigError: ``state`` is neither.
        """
        state = _from_areal(state) if _is_areal_state(state) else state
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(
                f"evaluator state: expected rltel's or AReaL's state_dict, got keys {sorted(state)}"
            )
        self._epochs.total, self._epochs.last = state["epochs"]
        self._steps.total, self._steps.last = state["steps"]
        self._last_time = float(state["last_time"])
        self._restart_epochs = bool(state["restart_epochs"])
        self._initial_due = bool(state["initial_due"])


def _is_areal_state(state: Mapping[str, Any]) -> bool:
    return "format" not in state and {"epoch", "step", "time"} <= set(state)


def _from_areal(state: Mapping[str, Any]) -> dict[str, Any]:
    """AReaL's ``EpochStepTimeFreqCtl`` state in rltel's layout (its periods are dropped)."""
    epoch, step, clock = state["epoch"], state["step"], state["time"]
    return {
        "format": STATE_FORMAT,
        "epochs": [epoch["steps"], epoch["last_steps"]],
        "steps": [step["steps"], step["last_steps"]],
        "last_time": clock["last_time"],
        "restart_epochs": epoch["initial_value"],
        "initial_due": epoch["initial_value"],
    }


def _max_over_ranks(value: float, group: Any) -> float:
    """``value``'s maximum over the ranks of ``group`` under an initialized process group,
    as AReaL's time clock reduces it; ``value`` itself without one."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return value
    import torch

    from telemetry.record.comm import Comm

    comm = Comm(dist.group.WORLD if group is None else group)  # the group's device (NCCL)
    tensor = torch.tensor([value], dtype=torch.float64, device=comm.device)
    return float(comm.all_reduce(tensor, dist.ReduceOp.MAX).item())


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
