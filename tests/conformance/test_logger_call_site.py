"""AReaL's trainer call site replayed against rltel's StatsLogger.

Every PPO step AReaL's trainer runs ``PPOTrainer._export_and_commit_stats`` (AReaL main has
the same body as the released 1.0.4 executed here)::

    stats = self.actor.export_stats()
    stats.update(self.rollout.export_stats())
    if self.eval_rollout is not None:
        stats.update(self.eval_rollout.export_stats())
    self.stats_logger.commit(epoch, epoch_step, global_step, stats)

The trainer's method and the ``export_stats`` of each role are AReaL's own, executed from the
wheel (:func:`tests.conformance.areal_logger.method`): single-controller mode merges the train
workers' export into the controller's (``TrainController``) and averages the rollout
workers' exports by their ``__count`` (``RolloutController``); SPMD mode exports the one
process tracker per engine (``FSDPEngine`` / ``RemoteSGLangEngine``). Each commit goes to
AReaL's StatsLogger and to rltel's at once, so both log the very same data; what they wrote
to TensorBoard is read back with TensorBoard's reader and must be equal.
"""

from __future__ import annotations

import contextlib
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from tests.conformance import areal_logger as al
from tests.conformance.cases import close

STEPS = 3
STEP_TAG = "rltel/step"


def areal_method(relative: str, cls: str, name: str, **namespace: Any) -> Callable:
    return al.method(relative, cls, name, dict(namespace))


def trainer(actor: Any, rollout: Any, eval_rollout: Any, single_controller: bool) -> Any:
    """A trainer holding the roles, with AReaL's ``_export_and_commit_stats``."""
    commit = areal_method(
        "trainer/rl_trainer.py",
        "PPOTrainer",
        "_export_and_commit_stats",
        is_single_controller=lambda: single_controller,
        dist=types.SimpleNamespace(barrier=lambda group=None: None),
        current_platform=types.SimpleNamespace(synchronize=lambda: None),
    )
    role = types.SimpleNamespace(actor=actor, rollout=rollout, eval_rollout=eval_rollout)
    role.export_and_commit = types.MethodType(commit, role)
    return role


def train_controller(tracker: Any, worker: Callable[[], dict]) -> Any:
    """AReaL's ``TrainController.export_stats``: its own tracker, updated by the worker's."""
    export = areal_method(
        "infra/controller/train_controller.py",
        "TrainController",
        "export_stats",
        stats_tracker=tracker,
    )
    role = types.SimpleNamespace(_custom_function_call=lambda method: worker())
    role.export_stats = types.MethodType(export, role)
    return role


def rollout_controller(workers: list[Callable[[], dict]]) -> Any:
    """AReaL's ``RolloutController.export_stats``: the workers' exports averaged by count."""
    export = areal_method(
        "infra/controller/rollout_controller.py",
        "RolloutController",
        "export_stats",
        defaultdict=defaultdict,
    )
    role = types.SimpleNamespace(
        _collective_rpc=lambda method, http_timeout: [worker() for worker in workers]
    )
    role.export_stats = types.MethodType(export, role)
    return role


def spmd_actor(tracker: Any) -> Any:
    """AReaL's ``FSDPEngine.export_stats``: the process tracker over the DP group."""
    export = areal_method(
        "engine/fsdp_engine.py", "FSDPEngine", "export_stats", stats_tracker=tracker
    )
    role = types.SimpleNamespace(
        _offload_aware_context=contextlib.nullcontext, data_parallel_group=None, cpu_group=None
    )
    role.export_stats = types.MethodType(export, role)
    return role


def spmd_rollout(tracker: Any, before: Callable[[], None]) -> Any:
    """AReaL's ``RemoteSGLangEngine.export_stats`` (the process tracker), ``before`` run
    first: the rollout thread recording between the actor's export and this one."""
    export = areal_method(
        "engine/sglang_remote.py", "RemoteSGLangEngine", "export_stats", stats_tracker=tracker
    )
    role = types.SimpleNamespace()
    bound = types.MethodType(export, role)

    def export_stats() -> dict:
        before()
        return bound()

    role.export_stats = export_stats
    return role


def record_update(tracker: Any, step: int) -> None:
    """What the PPO actor records in one update (AReaL's stats_tracker API)."""
    mask = torch.tensor([True, False, True, True, True])
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        tracker.denominator(n_valid_tokens=mask, n_seqs=torch.ones(2, dtype=torch.bool))
        loss = torch.tensor([0.25, 9.0, 0.5, 0.75, 1.0]) * (step + 1)
        tracker.stat(loss=loss, denominator="n_valid_tokens")
        tracker.stat(task_reward=torch.tensor([0.0, 1.0]), denominator="n_seqs")
        tracker.scalar(grad_norm=1.5 + step, lr=1e-6)


def record_rewards(tracker: Any, scope: str, rewards: list[float]) -> None:
    """What a workflow records per trajectory: ``get(stat_scope()).scalar(reward=r)``."""
    for reward in rewards:
        tracker.get(scope).scalar(reward=reward)


def recorded(tracker: Any, record: Callable[[], None]) -> dict:
    """A worker process's export: ``record()``, then ``export_all()`` of its tracker."""
    record()
    return tracker.export_all()


class Tee:
    """Hands every commit to AReaL's StatsLogger and to rltel's."""

    def __init__(self, areal: Any, rltel: Any) -> None:
        self.loggers = (areal, rltel)

    def commit(self, *args: Any) -> None:
        for stats_logger in self.loggers:
            stats_logger.commit(*args)


def both(replay: Callable[[Tee], None]) -> tuple[dict, dict]:
    """What AReaL's and rltel's StatsLogger wrote, given the same commits by ``replay``."""
    written: dict[str, dict] = {}

    def with_areal(areal: Any) -> None:
        written["rltel"] = al.run_rltel(lambda rltel: replay(Tee(areal, rltel)))

    written["areal"] = al.run_areal(with_areal)
    return written["areal"], written["rltel"]


def assert_same(areal: dict, rltel: dict) -> None:
    rltel_rows = al.without(rltel["tensorboard"], STEP_TAG)
    assert close(areal["tensorboard"], rltel_rows, 0.0), (areal["tensorboard"], rltel_rows)
    assert areal["lines"] == rltel["lines"] and areal["state"] == rltel["state"]
    steps = [step for tag, step, _ in rltel["tensorboard"] if tag == STEP_TAG]
    assert steps == list(range(STEPS))


def values(rows: list[tuple[str, int, float]], tag: str) -> list[float]:
    return [value for name, _, value in rows if name == tag]


def test_single_controller_call_site_with_areal_trackers():
    controller, train_worker = al.areal_tracker(), al.areal_tracker()
    workers = [al.areal_tracker() for _ in range(2)]
    eval_worker = al.areal_tracker()
    step = [0]

    actor = train_controller(
        controller, lambda: recorded(train_worker, lambda: record_update(train_worker, step[0]))
    )
    rollout = rollout_controller(
        [
            lambda: recorded(workers[0], lambda: record_rewards(workers[0], "rollout", [1.0])),
            lambda: recorded(
                workers[1], lambda: record_rewards(workers[1], "rollout", [0.0, 0.0, 1.0])
            ),
        ]
    )
    eval_rollout = rollout_controller(
        [lambda: recorded(eval_worker, lambda: record_rewards(eval_worker, "eval-rollout", [0.5]))]
    )
    ppo = trainer(actor, rollout, eval_rollout, single_controller=True)

    def replay(tee: Tee) -> None:
        ppo.stats_logger = tee
        for step[0] in range(STEPS):
            with controller.record_timing("train_step"):
                pass
            ppo.export_and_commit(epoch=0, epoch_step=step[0], global_step=step[0])

    areal, rltel = both(replay)
    assert_same(areal, rltel)
    rows = areal["tensorboard"]
    assert values(rows, "rollout/reward") == [0.5] * STEPS  # (1 + 0 + 0 + 1) / 4
    assert values(rows, "eval-rollout/reward") == [0.5] * STEPS
    assert values(rows, "ppo_actor/update/loss/avg") == [0.625, 1.25, 1.875]
    assert len(values(rows, "timeperf/train_step")) == STEPS
    assert not [tag for tag, _, _ in rltel["tensorboard"] if tag.endswith("__count")]


def test_spmd_call_site_with_rltel_tracker():
    from telemetry import stats_tracker

    stats_tracker.export_all()  # this process's tracker starts empty
    step = [0]
    actor = spmd_actor(stats_tracker)
    rollout = spmd_rollout(
        stats_tracker, lambda: record_rewards(stats_tracker, "rollout", [0.25 * step[0]])
    )
    ppo = trainer(actor, rollout, None, single_controller=False)

    def replay(tee: Tee) -> None:
        ppo.stats_logger = tee
        for step[0] in range(STEPS):
            record_rewards(stats_tracker, "rollout", [1.0, 0.0])
            record_update(stats_tracker, step[0])
            with stats_tracker.record_timing("train_step"):
                pass
            ppo.export_and_commit(epoch=0, epoch_step=step[0], global_step=step[0])

    areal, rltel = both(replay)
    assert_same(areal, rltel)
    # the rollout thread's reward, exported after the actor's, replaces the actor's value
    assert values(areal["tensorboard"], "rollout/reward") == [0.0, 0.25, 0.5]
    assert values(areal["tensorboard"], "ppo_actor/update/grad_norm") == [1.5, 2.5, 3.5]
