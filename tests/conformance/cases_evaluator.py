"""AReaL conformance cases of the evaluator: the global steps at which ``evaluate_fn`` ran.

Both sides are built as AReaL's trainers build theirs, ``Evaluator(config.evaluator,
ft_spec)`` with AReaL's own ``EvaluatorConfig`` dataclass and ``FinetuneSpec``, and called
as its trainer loop calls them: ``evaluate(fn, epoch, epoch_step, global_step)`` after every
step. A resumed run replays AReaL's recover order: at step ``k`` the recover checkpoint
(``state_dict()``, through JSON as ``evaluator_info.json``) is written before that step's
evaluation, and the new process builds a fresh evaluator, loads it and goes on at ``k + 1``.

Time: AReaL reads ``datetime.now()`` from ``areal.utils.timeutil``'s global ``datetime``,
which :func:`areal_clock` replaces by one reading a fake clock; rltel's evaluator reads the
same fake clock (``clock=``), so time cases are exact. AReaL 1.0.4's time clock works only
under an initialized process group, so those cases run on two gloo ranks (one spawn for
all of them), whose clocks run at different rates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from telemetry.model.errors import ConfigError
from tests.conformance.areal_api import evaluator_api
from tests.conformance.cases import Case

EPOCH0 = 1_700_000_000.0
"""The fake clock's start (seconds since 1970; halves and integers are exact datetimes)."""


class FakeClock:
    """Seconds that move only when set."""

    def __init__(self, now: float = EPOCH0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def areal_clock(clock: FakeClock) -> Iterator[None]:
    """AReaL's ``timeutil.datetime.now()`` reads ``clock`` while inside."""
    timeutil = evaluator_api().timeutil

    class FakeDatetime(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> dt.datetime:
            return dt.datetime.fromtimestamp(clock(), tz)

    saved, timeutil.datetime = timeutil.datetime, FakeDatetime
    try:
        yield
    finally:
        timeutil.datetime = saved


@dataclass(frozen=True)
class Run:
    """One training run: the evaluator config, its shape and an optional resume.

    Attributes:
        config: AReaL ``EvaluatorConfig`` fields.
        steps_per_epoch, epochs: the run's shape.
        save_at: the step whose recover checkpoint the run resumes from (None: no resume).
        resumed: the config of the resumed process (default: ``config``).
        secs_per_step: the clock's advance per step, one value per rank.
        downtime: seconds between the checkpoint and the resumed process's first step.
        areal_state: AReaL's evaluator runs up to the checkpoint on both sides, so each
            side's resumed process loads AReaL's state dict.
    """

    config: dict[str, Any]
    steps_per_epoch: int = 4
    epochs: int = 3
    save_at: int | None = None
    resumed: dict[str, Any] | None = None
    secs_per_step: tuple[float, ...] = (0.0,)
    downtime: float = 0.0
    areal_state: bool = False


def areal_evaluator(config: dict[str, Any], steps_per_epoch: int) -> Any:
    """AReaL's evaluator as its trainer builds it."""
    api = evaluator_api()
    return api.Evaluator(api.EvaluatorConfig(**config), ft_spec(steps_per_epoch))


def rltel_evaluator(config: dict[str, Any], steps_per_epoch: int, clock: FakeClock) -> Any:
    """rltel's evaluator from the same AReaL objects (the clock injected)."""
    from telemetry.evaluator import Evaluator

    api = evaluator_api()
    return Evaluator(api.EvaluatorConfig(**config), ft_spec(steps_per_epoch), clock=clock)


def ft_spec(steps_per_epoch: int) -> Any:
    """AReaL's ``FinetuneSpec`` with ``steps_per_epoch`` steps (batches of 8)."""
    return evaluator_api().FinetuneSpec(
        total_train_epochs=3, dataset_size=8 * steps_per_epoch, train_batch_size=8
    )


def drive(evaluator: Any, run: Run, steps: range, clock: FakeClock, rank: int) -> list[int]:
    """AReaL's trainer loop over ``steps``: the global steps whose evaluation ran."""
    fired: list[int] = []
    for global_step in steps:
        clock.now += run.secs_per_step[rank]
        epoch, epoch_step = divmod(global_step, run.steps_per_epoch)
        evaluator.evaluate(lambda g=global_step: fired.append(g), epoch, epoch_step, global_step)
    return fired


def schedule(make: Callable[[dict[str, Any], FakeClock], Any], run: Run, rank: int = 0) -> Any:
    """The run on one side (``make`` builds that side's evaluator): the steps whose
    evaluation ran, or the error's type name (with its message for a ``ConfigError``).

    With ``run.areal_state``, AReaL's evaluator runs the part before the checkpoint on both
    sides, so the sides differ only in who resumes from AReaL's state dict.
    """
    clock = FakeClock()
    total = run.steps_per_epoch * run.epochs
    first = make
    if run.areal_state:
        first = lambda config, _: areal_evaluator(config, run.steps_per_epoch)  # noqa: E731
    with areal_clock(clock):
        try:
            evaluator = first(run.config, clock)
            if run.save_at is None:
                return drive(evaluator, run, range(total), clock, rank)
            fired = drive(evaluator, run, range(run.save_at), clock, rank)
            clock.now += run.secs_per_step[rank]  # the step the checkpoint was written in
            state = json.loads(json.dumps(evaluator.state_dict()))
            clock.now += run.downtime
            evaluator = make(run.resumed or run.config, clock)
            evaluator.load_state_dict(state)
            return fired + drive(evaluator, run, range(run.save_at + 1, total), clock, rank)
        except ConfigError as exc:
            return f"ConfigError: {exc}"
        except Exception as exc:
            return type(exc).__name__


def areal_side(run: Run, rank: int = 0) -> Any:
    """The run on AReaL's evaluator."""
    return schedule(lambda config, _: areal_evaluator(config, run.steps_per_epoch), run, rank)


def rltel_side(run: Run, rank: int = 0) -> Any:
    """The run on rltel's evaluator."""
    make = lambda config, clock: rltel_evaluator(config, run.steps_per_epoch, clock)  # noqa: E731
    return schedule(make, run, rank)


def case(name: str, call: str, run: Run, **difference: Any) -> Case:
    """A case comparing ``run`` on both sides, in this process."""
    return Case(name, call, lambda: areal_side(run), lambda: rltel_side(run), **difference)


# -- time cases: two gloo ranks, one spawn for all ----------------------------------------

TIME_RUNS: dict[str, Run] = {
    "secs_on_two_ranks": Run({"freq_secs": 5}, secs_per_step=(1.0, 2.0)),
    "secs_steps_epochs_on_two_ranks": Run(
        {"freq_secs": 7, "freq_steps": 3, "freq_epochs": 1}, secs_per_step=(1.5, 1.0)
    ),
    "secs_before_train_on_two_ranks": Run(
        {"freq_secs": 4, "eval_before_train": True}, secs_per_step=(1.0, 1.0)
    ),
    "secs_resume_counts_downtime_on_two_ranks": Run(
        {"freq_secs": 5}, save_at=5, downtime=3.0, secs_per_step=(1.0, 1.0)
    ),
    "secs_resume_from_areal_state_on_two_ranks": Run(
        {"freq_secs": 5, "freq_steps": 4},
        save_at=6,
        downtime=1.0,
        secs_per_step=(1.0, 0.5),
        areal_state=True,
    ),
}


def _time_rank(rank: int, world: int) -> dict[str, tuple[Any, Any]]:
    """On one rank: every time run, AReaL's then rltel's (the ranks' collectives pair up)."""
    del world
    return {name: (areal_side(run, rank), rltel_side(run, rank)) for name, run in TIME_RUNS.items()}


@cache
def _time_results() -> list[dict[str, tuple[Any, Any]]]:
    from tests.distributed import run_ranks

    return run_ranks(_time_rank, 2, timeout=120)


def time_case(key: str, call: str) -> Case:
    """The time case ``evaluator_<key>`` (``key`` of :data:`TIME_RUNS`): each side's result
    is the list of both ranks' steps."""
    return Case(
        f"evaluator_{key}",
        call,
        lambda: [rank[key][0] for rank in _time_results()],
        lambda: [rank[key][1] for rank in _time_results()],
    )


EVALUATE = "evaluate(fn, epoch, step, global_step) after every step"
SPE4 = "4 steps/epoch, 3 epochs"

CASES: list[Case] = [
    case("evaluator_epochs", f"freq_epochs=1; {SPE4}; {EVALUATE}", Run({"freq_epochs": 1})),
    case(
        "evaluator_epochs_2",
        f"freq_epochs=2; 3 steps/epoch, 5 epochs; {EVALUATE}",
        Run({"freq_epochs": 2}, steps_per_epoch=3, epochs=5),
    ),
    case("evaluator_steps", f"freq_steps=3; {SPE4}; {EVALUATE}", Run({"freq_steps": 3})),
    case("evaluator_steps_1", f"freq_steps=1; {SPE4}; {EVALUATE}", Run({"freq_steps": 1})),
    case(
        "evaluator_steps_and_epochs_are_independent",
        f"freq_steps=3, freq_epochs=1; {SPE4}; {EVALUATE}",
        Run({"freq_steps": 3, "freq_epochs": 1}),
    ),
    case(
        "evaluator_steps_2_epochs_3",
        f"freq_steps=2, freq_epochs=3; 5 steps/epoch, 4 epochs; {EVALUATE}",
        Run({"freq_steps": 2, "freq_epochs": 3}, steps_per_epoch=5, epochs=4),
    ),
    case("evaluator_no_frequency", f"no frequency; {SPE4}; {EVALUATE}", Run({})),
    case(
        "evaluator_before_train_only",
        f"eval_before_train=True; {SPE4}; {EVALUATE}",
        Run({"eval_before_train": True}),
    ),
    case(
        "evaluator_before_train_restarts_the_epoch_clock",
        f"eval_before_train=True, freq_epochs=2; 1 step/epoch, 7 epochs; {EVALUATE}",
        Run({"eval_before_train": True, "freq_epochs": 2}, steps_per_epoch=1, epochs=7),
    ),
    case(
        "evaluator_before_train_steps",
        f"eval_before_train=True, freq_steps=3; {SPE4}; {EVALUATE}",
        Run({"eval_before_train": True, "freq_steps": 3}),
    ),
    case(
        "evaluator_before_train_steps_epochs",
        f"eval_before_train=True, freq_steps=5, freq_epochs=1; {SPE4}; {EVALUATE}",
        Run({"eval_before_train": True, "freq_steps": 5, "freq_epochs": 1}),
    ),
    case(
        "evaluator_resume_mid_run",
        f"freq_steps=3, freq_epochs=1; {SPE4}; recover checkpoint at step 5, resume at 6",
        Run({"freq_steps": 3, "freq_epochs": 1}, save_at=5),
    ),
    case(
        "evaluator_resume_before_the_first_evaluation",
        f"eval_before_train=True, freq_epochs=1; {SPE4}; checkpoint at step 0, resume at 1",
        Run({"eval_before_train": True, "freq_epochs": 1}, save_at=0),
    ),
    case(
        "evaluator_resume_from_areal_state",
        f"freq_steps=3, freq_epochs=1, eval_before_train; {SPE4}; "
        "rltel loads AReaL's state_dict of step 4",
        Run(
            {"freq_steps": 3, "freq_epochs": 1, "eval_before_train": True},
            save_at=4,
            areal_state=True,
        ),
    ),
    case(
        "evaluator_resume_with_a_new_frequency",
        f"freq_epochs=1; {SPE4}; checkpoint at step 5; resumed with freq_steps=2 added",
        Run({"freq_epochs": 1}, save_at=5, resumed={"freq_epochs": 1, "freq_steps": 2}),
        why=(
            "AReaL's load_state_dict restores the saved frequencies over the resumed "
            "config, so a frequency changed on resume is silently ignored; rltel's "
            "frequencies are the config's (the step clock counts from the run's start)"
        ),
        expected=([3, 7, 11], [3, 6, 7, 8, 10, 11]),
    ),
    case(
        "evaluator_freq_steps_0",
        f"freq_steps=0; {SPE4}; {EVALUATE}",
        Run({"freq_steps": 0}),
        why="AReaL takes 0 as every step (0 steps have always elapsed); rltel refuses it",
        expected=(
            list(range(12)),
            "ConfigError: evaluator.freq_steps must be greater than 0, got 0",
        ),
    ),
    case(
        "evaluator_secs_without_a_process_group",
        f"freq_secs=5, 1 s per step; {SPE4}; {EVALUATE}; torch.distributed not initialized",
        Run({"freq_secs": 5}, secs_per_step=(1.0,)),
        why=(
            "AReaL 1.0.4 raises UnboundLocalError (interval_seconds is bound only under "
            "dist.is_initialized()); rltel uses this process's time, as AReaL does on two "
            "ranks with equal clocks (and as AReaL's main branch does)"
        ),
        expected=("UnboundLocalError", [4, 9]),
    ),
    time_case(
        "secs_on_two_ranks",
        f"freq_secs=5, ranks at 1 and 2 s per step; {SPE4}; {EVALUATE}; gloo world of 2",
    ),
    time_case(
        "secs_steps_epochs_on_two_ranks",
        f"freq_secs=7, freq_steps=3, freq_epochs=1, ranks at 1.5 and 1 s per step; {SPE4}",
    ),
    time_case(
        "secs_before_train_on_two_ranks",
        f"freq_secs=4, eval_before_train=True, 1 s per step; {SPE4}; gloo world of 2",
    ),
    time_case(
        "secs_resume_counts_downtime_on_two_ranks",
        f"freq_secs=5, 1 s per step; checkpoint at step 5, 3 s down, resume at 6; {SPE4}",
    ),
    time_case(
        "secs_resume_from_areal_state_on_two_ranks",
        f"freq_secs=5, freq_steps=4, ranks at 1 and 0.5 s per step; rltel loads AReaL's "
        f"state of step 6 after 1 s down; {SPE4}",
    ),
]
