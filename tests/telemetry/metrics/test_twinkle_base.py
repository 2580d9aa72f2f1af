"""The Twinkle Metric base: declared states, their reset, and one 2-collective reduction."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.metrics.twinkle import Accuracy, CompletionRewardMetric, GRPOMetric, LossMetric
from telemetry.metrics.twinkle.base import Metric
from telemetry.model.errors import InvalidValueError, KeyMismatchError
from telemetry.record import export, reduce
from telemetry.record.layout import ReduceOp
from telemetry.record.reduce import collectives_issued
from telemetry.record.source import SourceKey
from tests.distributed import run_ranks


class Extremes(Metric):
    """Sum, count, min, max and the latest value of its ``value=`` keyword."""

    keywords = ("value", "typo")

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.add_state("total", ReduceOp.SUM)
        self.add_state("n", ReduceOp.SUM)
        self.add_state("low", ReduceOp.MIN)
        self.add_state("high", ReduceOp.MAX)
        self.add_state("latest", ReduceOp.MAX, replace=True)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        if "typo" in kwargs:
            self._update("totl", 1.0)
        value = torch.as_tensor(kwargs["value"], dtype=torch.float64)
        self._update("total", value)
        self._update("n", 1.0)
        self._update("low", value)
        self._update("high", value)
        self._update("latest", value)

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        return {name: float(values[0]) for name, values in states.items()}


def test_declared_states_fold_by_their_reduce_op():
    metric = Extremes()
    for value in (3.0, -1.0, 2.0):
        metric.accumulate(None, value=value)
    assert metric.calculate() == {"total": 4.0, "n": 3.0, "low": -1.0, "high": 3.0, "latest": 2.0}


def test_reset_returns_every_state_to_its_default_and_keeps_the_declarations():
    metric = Extremes()
    metric.accumulate(None, value=5.0)
    metric.reset()
    assert metric.calculate() == {}  # nothing updated: no state joins the reduction
    metric.accumulate(None, value=-2.0)
    assert metric.calculate() == {
        "total": -2.0,
        "n": 1.0,
        "low": -2.0,
        "high": -2.0,
        "latest": -2.0,
    }


def test_an_undeclared_state_names_the_metric_and_the_state():
    metric = Extremes(name="extremes_eval")
    with pytest.raises(InvalidValueError, match=r"extremes_eval/totl.*Extremes.*not declared"):
        metric.accumulate(None, value=1.0, typo=True)


def test_a_state_update_of_the_wrong_size_names_the_state():
    metric = Extremes()
    with pytest.raises(InvalidValueError, match=r"extremes/total: state has 1 elements"):
        metric._update("total", torch.ones(3))


def test_declarations_are_checked():
    metric = Extremes()
    with pytest.raises(ValueError, match="declared twice"):
        metric.add_state("total", ReduceOp.SUM)
    with pytest.raises(ValueError, match="per-rank"):
        metric.add_state("slots", ReduceOp.SUM, size=None, replace=True, per_rank=True)
    with pytest.raises(ValueError, match="needs a size"):
        metric.add_state("open", ReduceOp.SUM, size=None)


def test_every_metric_declares_its_states_in_init():
    grpo = GRPOMetric(top_k_kl=2)
    assert {"n", "new_sum", "kl_sum", "clip_n", "top_kl"} <= set(grpo._states)
    assert grpo._rules["top_kl"].per_rank and grpo._states["top_kl"].size is None
    loss = LossMetric()
    assert loss._rules["grad_norm"].replace and loss._states["tokens"].reduce is ReduceOp.SUM
    rewards = CompletionRewardMetric()
    assert rewards._states["reward:min"].reduce is ReduceOp.MIN
    rewards.accumulate(None, rewards={"format": [1.0, 0.0]})  # a named reward: its moments
    assert rewards._states["rewards/format:max"].reduce is ReduceOp.MAX


def _collectives_per_calculate(rank: int, world: int) -> tuple[dict, int]:
    metric = Extremes(process_group=dist.group.WORLD)
    for value in [(1.0, 7.0), (-3.0,)][rank]:
        metric.accumulate(None, value=value)
    before = collectives_issued()
    result = metric.calculate()
    return result, collectives_issued() - before


def test_two_ranks_reduce_every_state_in_two_collectives():
    results = run_ranks(_collectives_per_calculate, 2)
    for result, collectives in results:
        assert collectives == 3  # the key check, the SUM and the MIN all-reduce
        assert result == {"total": 5.0, "n": 3.0, "low": -3.0, "high": 7.0, "latest": 7.0}


# calculate() reduces through the export's reduce_sources, never reduce_states.


@contextmanager
def _export_reductions(calls: list[list]) -> Iterator[None]:
    """Record the keys of every reduction the export makes; refuse ``reduce_states``."""
    real = export.reduce_and_vote

    def spy(states: Mapping, *args: Any, **kwargs: Any) -> Any:
        calls.append(sorted(states))
        return real(states, *args, **kwargs)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Twinkle metric called reduce_states")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "reduce_and_vote", spy)
        patch.setattr(reduce, "reduce_states", refuse)
        yield


def _source_keys(name: str, states: tuple[str, ...]) -> list[SourceKey]:
    return sorted(SourceKey(f"twinkle/{name}", 0, f"twinkle/{name}/{s}") for s in states)


EXTREMES = ("high", "latest", "low", "n", "total")


def test_calculate_without_a_group_reduces_through_the_export_rank_locally():
    calls: list[list] = []
    metric = Extremes(name="local")
    for value in (2.0, float("inf"), -0.5):
        metric.accumulate(None, value=value)
    with _export_reductions(calls):
        result = metric.calculate()
    assert calls == [_source_keys("local", EXTREMES)]
    assert result == {"total": np.inf, "n": 3.0, "low": -0.5, "high": np.inf, "latest": -0.5}


VALUES = [1.5, -4.0, 2.25]


def _only_rank_0_accumulates(rank: int, world: int) -> tuple[dict, list[list]]:
    calls: list[list] = []
    metric = Extremes(process_group=dist.group.WORLD, name="half")
    for value in VALUES if rank == 0 else []:
        metric.accumulate(None, value=value)
    with _export_reductions(calls):
        return metric.calculate(), calls


def test_a_rank_that_accumulated_nothing_leaves_the_reference_values():
    values = np.array(VALUES)
    reference = {
        "total": float(values.sum()),
        "n": float(values.size),
        "low": float(values.min()),
        "high": float(values.max()),
        "latest": float(values[-1]),
    }
    for rank, (result, calls) in enumerate(run_ranks(_only_rank_0_accumulates, 2)):
        assert result == reference
        assert calls == [_source_keys("half", EXTREMES if rank == 0 else ())]


def _empty_windows(rank: int, world: int) -> tuple[dict, int]:
    metric = Accuracy(process_group=dist.group.WORLD)
    before = collectives_issued()
    return metric.calculate(), collectives_issued() - before


def test_an_empty_window_on_every_rank_gives_what_finalize_gives_for_no_states():
    empty = Accuracy()._finalize({})
    assert empty == {"correct_tokens": 0.0, "total_tokens": 0.0}  # not {}: zeros
    assert Accuracy().calculate() == empty
    for result, collectives in run_ranks(_empty_windows, 2):
        assert result == empty
        assert collectives == 1  # the key check finds no key: nothing to reduce


class Ragged(Metric):
    """One replaced vector whose length its update sets."""

    keywords = ("n",)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.add_state("v", ReduceOp.MAX, size=None, replace=True)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        self._update("v", torch.zeros(kwargs["n"]))

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        return {}


def _mismatched_sizes(rank: int, world: int) -> tuple[str, bool]:
    metric = Ragged(process_group=dist.group.WORLD)
    metric.accumulate(None, n=rank + 1)
    with pytest.raises(KeyMismatchError) as raised:
        metric.calculate()
    return str(raised.value), metric._value("v") is not None


def test_a_layout_mismatch_names_the_key_and_its_metric_and_keeps_the_window():
    for message, kept in run_ranks(_mismatched_sizes, 2):
        assert "key 'twinkle/ragged/v' of source 'twinkle/ragged'" in message
        assert kept
