"""AReaL's trainer drives rltel's evaluator as it drives its own.

``areal/trainer/rl_trainer.py`` (1.0.4, and main) builds ``Evaluator(config.evaluator,
ft_spec)`` from its ``EvaluatorConfig`` dataclass and ``FinetuneSpec``, lets its recover
handler load ``evaluator_info.json`` into it, then calls ``evaluate(fn, epoch, epoch_step,
global_step)`` after every step of ``range(start_step, max_steps)``; a recover checkpoint
(``evaluator.state_dict()`` as JSON) is written before that step's evaluation. The replay
below runs that sequence on AReaL's evaluator and on rltel's, with AReaL's own classes.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any

import pytest

from telemetry.evaluator import Evaluator
from tests.conformance.areal_api import evaluator_api

BATCH = 8


def experiment(**evaluator: Any) -> SimpleNamespace:
    """The parts of AReaL's experiment config the trainer reads for evaluation."""
    api = evaluator_api()
    names = {"experiment_name": "gsm8k-grpo", "trial_name": "trial0", "fileroot": "/tmp/areal"}
    return SimpleNamespace(
        evaluator=api.EvaluatorConfig(**names, **evaluator),
        total_train_epochs=3,
        train_dataset=SimpleNamespace(batch_size=BATCH),
    )


def train(
    evaluator_cls: type,
    config: SimpleNamespace,
    batches: int,
    recover: tuple[int, str] | None = None,
    crash_at: int | None = None,
) -> tuple[list[int], str | None]:
    """rl_trainer's evaluation calls: the steps whose evaluation ran and, with ``crash_at``,
    the recover checkpoint written at that step before the process ended."""
    ft_spec = evaluator_api().FinetuneSpec(
        total_train_epochs=config.total_train_epochs,
        dataset_size=batches * config.train_dataset.batch_size,
        train_batch_size=config.train_dataset.batch_size,
    )
    evaluator = evaluator_cls(config.evaluator, ft_spec)
    start_step = 0
    if recover is not None:  # RecoverHandler.load: evaluator_info.json
        last_step, evaluator_info = recover
        evaluator.load_state_dict(json.loads(evaluator_info))
        start_step = last_step + 1
    fired: list[int] = []

    def evaluate_fn(eval_workflow: str, global_step: int) -> None:
        assert eval_workflow == "eval"
        fired.append(global_step)

    steps_per_epoch = batches
    for global_step in range(start_step, config.total_train_epochs * steps_per_epoch):
        epoch, step = global_step // steps_per_epoch, global_step % steps_per_epoch
        if global_step == crash_at:  # RecoverHandler.dump, then the process ends
            return fired, json.dumps(evaluator.state_dict())
        fn = functools.partial(evaluate_fn, eval_workflow="eval", global_step=global_step)
        evaluator.evaluate(fn, epoch, step, global_step)
    return fired, None


SIDES = {"areal": lambda: evaluator_api().Evaluator, "rltel": lambda: Evaluator}


@pytest.mark.parametrize(
    ("evaluator", "expected"),
    [
        ({"freq_steps": 3, "freq_epochs": 1, "eval_before_train": True}, [0, 2, 3, 5, 7, 8, 11]),
        ({"freq_epochs": 1}, [3, 7, 11]),
        ({"eval_before_train": True}, [0]),
    ],
)
def test_the_trainer_loop(evaluator, expected):
    config = experiment(**evaluator)
    runs = {side: train(make(), config, batches=4)[0] for side, make in SIDES.items()}
    assert runs == {"areal": expected, "rltel": expected}


@pytest.mark.parametrize("crash_at", [0, 1, 5, 7, 10])
def test_the_trainer_recovers_where_areal_does(crash_at):
    config = experiment(freq_steps=3, freq_epochs=1, eval_before_train=True)
    runs = {}
    for side, make in SIDES.items():
        before, info = train(make(), config, batches=4, crash_at=crash_at)
        after, _ = train(make(), config, batches=4, recover=(crash_at, info))
        runs[side] = before + after
    assert runs["rltel"] == runs["areal"]
    assert runs["areal"][-1] == 11  # the last epoch's end, after the recovery


def test_areals_unset_section_names_do_not_matter():
    # AReaL's dataclass defaults experiment_name/trial_name/fileroot to omegaconf's MISSING;
    # neither evaluator reads them.
    api = evaluator_api()
    config = api.EvaluatorConfig(freq_steps=2)
    assert config.experiment_name == "???"
    spec = api.FinetuneSpec(total_train_epochs=1, dataset_size=4 * BATCH, train_batch_size=BATCH)
    evaluator = Evaluator(config, spec)
    assert evaluator.steps_per_epoch == 4
    assert [g for g in range(4) if evaluator.evaluate(lambda: None, 0, g, g)] == [1, 3]
