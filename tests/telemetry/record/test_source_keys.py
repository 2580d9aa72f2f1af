"""The export's merged reduction keys each state by its source and key: sources holding
the same key name reduce apart, and errors name the user's key and its source."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from telemetry import stats_tracker
from telemetry.model.errors import KeyMismatchError
from telemetry.model.snapshot import Gauge, Point
from telemetry.record.declared import DeclaredStates
from telemetry.record.export import registered_sources
from telemetry.record.layout import Reduced, ReduceOp
from telemetry.record.source import Collected, SourceKey, key_name
from tests.distributed import run_ranks


class Depth:
    """A producer sharing ``source_id`` and state key ``queue/depth`` with every other one;
    its points are named by ``label``."""

    source_id = "queue"

    def __init__(self, label: str, depth: float, size: int = 1) -> None:
        self.label, self.depth, self.size = label, depth, size
        self.states = DeclaredStates("queue/")
        self.states.add_state("depth", ReduceOp.SUM, size=size)

    def collect(self, key: str | None, reset: bool) -> Collected:
        values = torch.full((self.size,), self.depth, dtype=torch.float64)
        return Collected(self.states.states({"depth": values}))

    def build_points(self, reduced: Reduced) -> list[Point]:
        (total, *_) = self.states.values(reduced)["depth"]
        return [Gauge(f"{self.label}/total", float(total))]


def test_a_source_key_names_the_key_and_its_source():
    assert str(SourceKey("tracker:rollout", 0, "rollout/loss")) == (
        "key 'rollout/loss' of tracker 'rollout'"
    )
    assert str(SourceKey("tracker:", 0, "loss")) == "key 'loss' of the default tracker"
    assert str(SourceKey("queue", 0, "queue/depth")) == "key 'queue/depth' of source 'queue'"
    assert str(SourceKey("queue", 1, "queue/depth")) == "key 'queue/depth' of source 'queue' #2"
    assert key_name("loss") == "'loss'"  # a plain reduction's key, as before


def test_a_state_of_the_wrong_size_names_the_key_and_its_source():
    class Wrong(Depth):
        def collect(self, key: str | None, reset: bool) -> Collected:
            layout, _ = super().collect(key, reset).states["queue/depth"]
            return Collected({"queue/depth": (layout, torch.zeros(3, dtype=torch.float64))})

    with pytest.raises(KeyMismatchError) as raised:
        stats_tracker.export_sources([Depth("a", 1.0), Wrong("b", 1.0)])
    message = str(raised.value)
    assert message.startswith("key 'queue/depth' of source 'queue' #2: state has 3 elements")
    assert "SourceKey" not in message


def _same_key_in_three_sources(rank: int, world: int) -> dict:
    tracker = stats_tracker.DistributedStatsTracker()
    tracker.scalar(**{"queue/depth": 100.0 + rank})
    sources = [tracker, Depth("first", 1.0 + rank), Depth("second", 10.0 * (rank + 1))]
    stats = stats_tracker.export_sources(sources, reduce_group=dist.group.WORLD)
    return dict(stats)


def test_sources_with_the_same_key_name_reduce_apart():
    for out in run_ranks(_same_key_in_three_sources, 2):
        assert out["first/total"] == 1.0 + 2.0
        assert out["second/total"] == 10.0 + 20.0
        assert out["queue/depth"] == 100.5  # the tracker's scalar: the mean of both ranks
        assert out["queue/depth__count"] == 2


def _mismatches(rank: int, world: int) -> list[str]:
    """Three exports whose key sets differ between the ranks with one key's layout in
    conflict: in a named tracker, in the default tracker, in the second of two sources."""
    named = stats_tracker.DistributedStatsTracker("rollout")
    default = stats_tracker.DistributedStatsTracker()
    for tracker in (named, default):
        tracker.scalar(fine=1.0)
        if rank == 0:
            tracker.scalar(loss=1.0)
        else:
            tracker.denominator(valid=torch.ones(2, dtype=torch.bool))
            tracker.stat(loss=torch.ones(2), denominator="valid")
    cases = (
        [named],
        [default],
        [Depth("a", 1.0), Depth("b", 1.0, size=1 + rank)],
    )
    messages = []
    for sources in cases:
        with pytest.raises(KeyMismatchError) as raised:
            stats_tracker.export_sources(sources, reduce_group=dist.group.WORLD)
        messages.append(str(raised.value))
    return messages


def test_a_key_mismatch_between_ranks_names_the_users_key_and_its_source():
    for named, default, second in run_ranks(_mismatches, 2):
        assert named == (
            "ranks recorded keys with different layouts: key 'rollout/loss' of tracker "
            "'rollout': scalar vs stat(reduce=avg_min_max, buckets=0)"
        )
        assert default.endswith(
            ": key 'loss' of the default tracker: scalar vs stat(reduce=avg_min_max, buckets=0)"
        )
        assert second.endswith(
            ": key 'queue/depth' of source 'queue' #2: custom[sum,sum] vs custom[sum]"
        )
        for message in (named, default, second):
            assert "'tracker:" not in message and "source:" not in message  # the old tags
            assert "|" not in message and "SourceKey" not in message
            assert "fine" not in message and "valid" not in message


class EqualDepth(Depth):
    """A source that compares equal to any other of its kind (as a dataclass would)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EqualDepth)

    __hash__ = None  # type: ignore[assignment]


def test_registered_sources_join_export_all_each_once_until_unregistered():
    """Registration is by identity: twice is once, equal sources are two, and
    unregistering one leaves the others."""
    a, b, c = Depth("reg-a", 1.0), EqualDepth("reg-b", 2.0), EqualDepth("reg-c", 3.0)
    try:
        for source in (a, a, b, c):
            stats_tracker.register_source(source)
        mine = [s for s in registered_sources() if s in (a, b, c)]
        assert [id(s) for s in mine] == [id(a), id(b), id(c)]
        got = {k: v for k, v in stats_tracker.export_all().items() if k.startswith("reg-")}
        assert got == {"reg-a/total": 1.0, "reg-b/total": 2.0, "reg-c/total": 3.0}
        stats_tracker.unregister_source(b)
        stats_tracker.unregister_source(Depth("reg-a", 1.0))  # not registered: ignored
        labels = [s.label for s in registered_sources() if s in (a, c)]
        assert labels == ["reg-a", "reg-c"]
        got = [k for k in stats_tracker.export_all() if k.startswith("reg-")]
        assert got == ["reg-a/total", "reg-c/total"]
    finally:
        for source in (a, b, c):
            stats_tracker.unregister_source(source)
    assert not [s for s in registered_sources() if s in (a, b, c)]


def _reduce_flags(rank: int, world: int) -> dict:
    from telemetry.record.export import reduce_sources

    group = dist.group.WORLD
    tracker = stats_tracker.DistributedStatsTracker("flags")
    tracker.scalar(**{"timeperf/step": 1.0 + rank})  # a straggler view by default
    tracker.scalar(own=1.0, reduce_group=group)  # a per-key group: a second reduction
    plain = reduce_sources([tracker], group, reset=False)
    untracked = reduce_sources([tracker], group, reset=False, rank_spreads=False)
    voted = reduce_sources([tracker], group, reset=False, vote=rank == 1)
    first = reduce_sources([tracker], group)  # resets by default
    again = reduce_sources([tracker], group)
    return {
        "gather": (plain.gather, untracked.gather, voted.gather),
        "spreads": ([str(k) for k in plain.spreads], len(untracked.spreads)),
        "keys": (sorted(first.of(0)), sorted(again.of(0))),
    }


def test_reduce_sources_votes_only_when_asked_and_tracks_only_when_asked():
    """No rank voted: no gather, though a per-key group adds a reduction; one rank voted:
    every rank knows. ``rank_spreads=False`` (Twinkle's) computes no straggler view; the
    default resets each source."""
    for out in run_ranks(_reduce_flags, 2):
        assert out["gather"] == (False, False, True)
        assert out["spreads"] == (["key 'flags/timeperf/step' of tracker 'flags'"], 0)
        assert out["keys"] == (["flags/own", "flags/timeperf/step"], [])
