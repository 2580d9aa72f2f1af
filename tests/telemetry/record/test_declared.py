"""Declared states and the one StateSource protocol that the export walks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist

from telemetry import stats_tracker
from telemetry.model.snapshot import Gauge, Point, ScalarMean
from telemetry.record.declared import DeclaredStates
from telemetry.record.layout import PerRank, Reduced, ReduceOp, StateKind
from telemetry.record.source import Collected, StateSource
from tests.distributed import run_ranks

SUM, MIN, MAX = ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX


def test_a_declaration_gives_the_layout_and_the_keys():
    states = DeclaredStates("queue/")
    states.add_state("depth", (SUM, MAX, MIN), per_rank=(PerRank("bytes", 0, unit="By"),))
    states.add_state("rows", SUM, size=None)
    depth, rows = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), torch.ones(5)
    collected = states.states({"depth": depth, "rows": rows})
    assert list(collected) == ["queue/depth", "queue/rows"]
    layout, values = collected["queue/depth"]
    assert values is depth
    assert (layout.kind, layout.ops, layout.per_rank[0].unit) == (
        StateKind.CUSTOM,
        (SUM, MAX, MIN),
        "By",
    )
    assert collected["queue/rows"][0].ops == (SUM,) * 5  # the size each value sets
    assert states.states({"depth": depth})["queue/depth"][0] is layout  # built once
    assert states["depth"].size == 3 and "rows" in states and "other" not in states
    reduced = {k: (lay, v.numpy()) for k, (lay, v) in collected.items()}
    reduced["other/x"] = reduced["queue/rows"]  # another producer's key
    assert set(states.values(reduced)) == {"depth", "rows"}


def test_a_declaration_cannot_be_changed_once_made():
    """The layout ranks compare is built from it: it stays as declared."""
    declaration = DeclaredStates("queue/").add_state("depth", SUM, size=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        declaration.size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("depth", SUM), {}, "declared twice"),
        (("mean", "mean"), {}, "one of sum, min, max; got 'mean'"),
        (("zero", SUM), {"size": 0}, "positive int or None, got 0"),
        (("flag", SUM), {"size": True}, "positive int or None, got True"),
        (("pair", (SUM, MAX)), {"size": 3}, "2 reduce ops but size 3"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_state(args, kwargs, message):
    states = DeclaredStates("queue/")
    states.add_state("depth", SUM)
    with pytest.raises(ValueError, match=rf"queue/{args[0]}: .*{message}"):
        states.add_state(*args, **kwargs)


def test_register_source_refuses_what_is_not_a_state_source():
    class OldStyle:  # the former contract: collect_states / build_points(values)
        def collect_states(self) -> dict:
            return {}

    with pytest.raises(TypeError, match="OldStyle is not a StateSource.*collect"):
        stats_tracker.register_source(OldStyle())
    assert isinstance(stats_tracker.DEFAULT_TRACKER, StateSource)


class QueueDepth:
    """A producer with one declared state: [total, deepest, shallowest] plus bytes per rank."""

    source_id = "queue"

    def __init__(self, depths: list[float]) -> None:
        self.depths = depths
        self.states = DeclaredStates("queue/")
        per_rank = (PerRank("bytes", 0, unit="By"),)
        self.states.add_state("depth", (SUM, MAX, MIN), per_rank=per_rank)

    def collect(self, key: str | None, reset: bool) -> Collected:
        values = torch.tensor(
            [sum(self.depths), max(self.depths), min(self.depths)], dtype=torch.float64
        )
        if reset:
            self.depths = [0.0]
        return Collected(self.states.states({"depth": values}))

    def build_points(self, reduced: Reduced) -> list[Point]:
        total, deepest, shallowest = self.states.values(reduced)["depth"]
        return [
            Gauge("queue/total", float(total), unit="By"),
            Gauge("queue/deepest", float(deepest), unit="By"),
            Gauge("queue/shallowest", float(shallowest), unit="By"),
        ]


def _custom_source_and_a_tracker_on_one_rank(rank: int, world: int) -> dict:
    from telemetry.record import rank_spread

    rank_spread.track_ranks("queue/depth")
    sources: list = [stats_tracker.DistributedStatsTracker(), QueueDepth([1.0 + rank, 4.0])]
    if rank == 1:  # a named tracker only this rank has: every rank reports it
        named = stats_tracker.DistributedStatsTracker("rollout")
        named.scalar(reward=0.5)
        sources.append(named)
    stats = stats_tracker.export_sources(sources, reduce_group=dist.group.WORLD)
    return {p.key: (p.value, p.unit) for p in stats.points if isinstance(p, (Gauge, ScalarMean))}


def test_a_custom_source_reduces_with_the_trackers_and_a_tracker_of_one_rank_is_reported():
    for out in run_ranks(_custom_source_and_a_tracker_on_one_rank, 2):
        assert out["queue/total"] == (1.0 + 4.0 + 2.0 + 4.0, "By")
        assert out["queue/deepest"] == (4.0, "By")
        assert out["queue/shallowest"] == (1.0, "By")
        assert out["queue/depth/bytes/rank_min"] == (5.0, "By")  # its declared unit
        assert out["queue/depth/bytes/rank_max"] == (6.0, "By")
        assert out["queue/depth/bytes/slowest_rank"] == (1.0, "")
        assert out["rollout/reward"] == (0.5, "")
