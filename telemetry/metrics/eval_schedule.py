"""When to evaluate: AReaL's ``EpochStepTimeFreqCtl`` schedule and an adaptive one.

:class:`FrequencyControl` has three independent clocks (finished epochs, steps, seconds),
each restarting only when it fires itself; its state dict resumes it exactly and AReaL's
own state dicts load too. :class:`AdaptiveFrequencyControl` evaluates more often while a
watched metric stops improving. Both are :class:`FreqCtl`, the schedule an
:class:`~telemetry.metrics.evaluator.Evaluator` asks.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from telemetry.model.errors import ConfigError

__all__ = ["STATE_FORMAT", "AdaptiveFrequencyControl", "FreqCtl", "FrequencyControl"]

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
