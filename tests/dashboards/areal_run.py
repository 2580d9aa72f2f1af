"""Runs of AReaL's own PPO actor into rltel, for the dashboard and alert tests.

AReaL 1.0.4's ``PPOActor.ppo_update`` runs unchanged from its wheel (the conformance call-site
harness, :mod:`tests.conformance.test_call_sites`: its module-level ``stats_tracker`` bound to
rltel's :mod:`telemetry.stats_tracker`; stand-ins only for the engine's forward outputs and
optimizer step). Beside it, each AReaL run records what AReaL 1.0.4 has no producer for, as a
user adds it: rltel's ``record_train_infer`` (trainer = the engine's forward log-probs, rollout
= the batch's ``logprobs``) and ``record_advantage_fractions`` in ``ppo_actor``, rltel's
``TrainPerf`` around the update, and the rollout reward with the call of AReaL's RLVR workflow
(``stats_tracker.get("rollout").scalar(reward=...)``). A loop of the user's own records
``ppo_actor/update/loss`` as the quick start does.

The same batch also runs through AReaL's own tracker: its export is the reference for what
AReaL computes (the loss, the version stats).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch

from telemetry import stats_tracker
from telemetry.metrics.advantages import record_advantage_fractions
from telemetry.metrics.train_infer import record_train_infer
from telemetry.metrics.train_perf import TrainPerf
from telemetry.record.stats import Stats
from tests.conformance import loader
from tests.conformance.test_call_sites import (
    CURRENT_VERSION,
    Engine,
    actor_config,
    actor_namespace,
    make_batch,
)

AREAL, SICK, LOOP, BOTH = "areal", "areal-sick", "loop", "both"
"""The runs: AReaL's actor (with rltel's producers beside it); the same with a broken batch;
a loop of the user's own that records ``loss``; AReaL's actor plus the loop's ``loss``."""
RUNS = (AREAL, SICK, LOOP, BOTH)
SICK_SHIFT = 800.0
"""The sick run's trainer log-probs sit this far above the rollout's on one valid token:
``expm1`` overflows (k3 is +inf) and the probability ratio leaves every band."""


TRAINER_SHIFT = 0.1
"""The trainer's log-probs sit about this far above the rollout's (then clamped at 0): a
healthy mismatch (k3 near 0.005) of a known sign, trainer - rollout > 0."""


def batch(step: int, sick: bool = False) -> dict[str, torch.Tensor]:
    """AReaL's call-site batch of ``step``, its forward log-probs :data:`TRAINER_SHIFT` above
    the rollout's (plus noise); the sick one has a NaN advantage on a valid token, the
    trainer's log-prob :data:`SICK_SHIFT` above the rollout's on another, a NaN rollout
    log-prob on a third, and every generated token 4 versions behind."""
    data = make_batch(seed=step)
    gen = torch.Generator().manual_seed(200 + step)
    noise = 0.02 * torch.randn(data["logprobs"].shape, generator=gen)
    trainer = (data["logprobs"] + TRAINER_SHIFT + noise).clamp(max=0.0)
    data["forward_logp"] = trainer * data["attention_mask"]
    if sick:
        valid = data["loss_mask"].nonzero()
        (r0, c0), (r1, c1), (r2, c2) = (valid[i].tolist() for i in range(3))
        data["advantages"][r0, c0] = math.nan
        data["forward_logp"][r1, c1] = data["logprobs"][r1, c1] + SICK_SHIFT
        data["logprobs"][r2, c2] = math.nan
        data["versions"] = torch.where(data["versions"] >= 0, CURRENT_VERSION - 4, -1)
    return data


def _ppo_update(namespace: dict, data: dict[str, torch.Tensor]) -> None:
    """AReaL's ``PPOActor.ppo_update`` on a copy of ``data`` (it pops keys)."""
    actor_class = namespace["PPOActor"]
    actor = types.SimpleNamespace(config=actor_config(), engine=Engine(), m2_threshold=None)
    actor._ppo_update = functools.partial(actor_class._ppo_update, actor)
    actor_class.ppo_update(actor, [dict(data)])


@functools.cache
def _rltel_namespace() -> dict:
    return actor_namespace(stats_tracker)


def areal_reference(data: dict[str, torch.Tensor]) -> dict[str, float]:
    """What AReaL's own tracker exports for AReaL's update of ``data``."""
    tracker = loader.stats_tracker()
    _ppo_update(actor_namespace(tracker), data)
    return dict(tracker.export_all())


def loop_loss(step: int) -> torch.Tensor:
    """The loop's per-token loss at ``step`` on the batch's loss mask (zeros elsewhere)."""
    data = make_batch(seed=step)
    gen = torch.Generator().manual_seed(100 + step)
    return (torch.randn(data["loss_mask"].shape, generator=gen) + 0.5) * data["loss_mask"]


def _record_loop(step: int) -> None:
    """A loop's own ``ppo_actor/update/loss``, as the quick start records it."""
    mask = make_batch(seed=step)["loss_mask"].bool()
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        stats_tracker.denominator(n_valid_tokens=mask)
        stats_tracker.stat(loss=loop_loss(step), denominator="n_valid_tokens")


def _record_areal(data: dict[str, torch.Tensor], perf: TrainPerf, reward: float) -> None:
    """AReaL's update of ``data`` and rltel's producers beside it."""
    mask = data["loss_mask"].bool()
    with stats_tracker.scope("ppo_actor"):
        record_train_infer(data["forward_logp"], data["logprobs"], mask)
        record_advantage_fractions(data["advantages"], mask)
    with perf.measure(data["attention_mask"]):
        _ppo_update(_rltel_namespace(), data)
    stats_tracker.get("rollout").scalar(reward=reward)  # AReaL's areal/workflow/rlvr.py call


def reward(step: int) -> float:
    """The rollout reward of every AReaL run at ``step``."""
    return 0.25 + 0.125 * step


@dataclass
class Recorder:
    """Each run's step, exported from rltel's tracker as ``export_all`` does."""

    perf: dict[str, TrainPerf]

    @classmethod
    def start(cls) -> Recorder:
        """A ``TrainPerf`` per AReaL run (6 training FLOPs per token, no peak)."""
        perf = {
            run: TrainPerf(lambda n: 6.0 * n, device="cpu", register=False)
            for run in (AREAL, SICK, BOTH)
        }
        return cls(perf)

    def step(self, run: str, step: int) -> Stats:
        """Record ``run``'s ``step`` and export it."""
        if run == LOOP:
            return self._export(lambda: _record_loop(step), ())
        data = batch(step, sick=run == SICK)
        perf = self.perf[run]

        def record() -> None:
            _record_areal(data, perf, reward(step))
            if run == BOTH:
                _record_loop(step)

        return self._export(record, (perf,))

    @staticmethod
    def _export(record: Callable[[], None], sources: tuple[TrainPerf, ...]) -> Stats:
        record()
        for source in sources:
            stats_tracker.register_source(source)
        try:
            return stats_tracker.export_all()
        finally:
            for source in sources:
                stats_tracker.unregister_source(source)
