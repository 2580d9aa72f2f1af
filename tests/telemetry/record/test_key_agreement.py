"""The key-set agreement of a reduction (``reduce.agree``) on two gloo ranks.

One spawn runs every scenario below on both ranks, each agreement through a real ``Comm``
on the world group; only the group's cache key is chosen per scenario, so that one process
group stands for as many groups as the cache bounds need. The collectives each agreement
makes are counted at ``torch.distributed`` (``tests.distributed.Counted``). The multi-rank
reduction itself: ``test_reduce_paths.py``, ``test_reduce_scale.py``.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist

from telemetry.record.comm import Comm
from telemetry.record.layout import ReduceOp, StateKind, StateLayout
from telemetry.record.reduce import CACHED_GROUPS, CACHED_UNIONS, agree
from tests.distributed import Counted, run_ranks

ONE = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,))
OTHER = StateLayout(StateKind.CUSTOM, (ReduceOp.MAX,))
CHECK = ["all_reduce"]  # the 40-byte check alone: equal key sets, or a cached union
EXCHANGE = [*CHECK, "all_gather_object"]  # then the layouts exchanged
GROUP_KEYS = 1 << 62  # cache keys no real group has (those are ids)


class _Keyed(Comm):
    """The world group under a cache key of the test's choosing."""

    def __init__(self, key: int) -> None:
        super().__init__(dist.group.WORLD)
        self._key = key

    @property
    def key(self) -> int:
        return self._key


class _Rank:
    """One rank's agreements, each recorded as (keys, held by all, voted, collectives)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.counted = Counted()
        self.next_group = GROUP_KEYS

    def group(self) -> int:
        self.next_group += 1
        return self.next_group

    def agree(self, group: int, layouts: tuple[dict, dict], votes=(False, False)) -> tuple:
        self.counted.take()
        agreed, voted = agree(_Keyed(group), layouts[self.rank], votes[self.rank])
        calls = [name for name, _ in self.counted.take()]
        return agreed.keys, agreed.held_by_all, dict(agreed.layouts), voted, calls

    def union(self, group: int, i: int) -> list[str]:
        """Agree union ``i`` (rank 0 holds ``x<i>``, rank 1 ``y<i>``: no other union covers
        either); the keys, then the collectives made."""
        keys, held_by_all, _, _, calls = self.agree(group, ({f"x{i}": ONE}, {f"y{i}": ONE}))
        return [keys, held_by_all, *calls]


def _exchange_then_cache(me: _Rank) -> list:
    group = me.group()
    return [me.agree(group, ({"a": ONE}, {"a": ONE})), me.union(group, 0), me.union(group, 0)]


def _unions_per_group(me: _Rank) -> list:
    group = me.group()
    steps = [me.union(group, i) for i in range(CACHED_UNIONS)]
    steps += [me.union(group, i) for i in (0, CACHED_UNIONS, 0, 1)]
    return steps + [me.union(group, i) for i in (0, *range(3, CACHED_UNIONS + 1))]


def _groups(me: _Rank) -> list:
    first, second, *others = [me.group() for _ in range(CACHED_GROUPS + 1)]
    steps = [me.union(group, 0) for group in (first, second, *others[:-1])]
    return steps + [me.union(group, 0) for group in (first, others[-1], second, first)]


def _other_layout(me: _Rank) -> list:
    group = me.group()
    return [me.union(group, 0), me.agree(group, ({"x0": OTHER}, {"y0": ONE}))]


def _most_recent_first(me: _Rank) -> list:
    group, one, two = me.group(), ({"x0": ONE}, {"y0": ONE}), ({"x0": ONE, "z0": ONE}, {"y0": ONE})
    return [me.agree(group, layouts) for layouts in (one, two, one)]


def _votes(me: _Rank) -> list:
    same, union = ({"a": ONE}, {"a": ONE}), ({"x0": ONE}, {"y0": ONE})
    steps = []
    for votes in ((False, False), (False, True), (True, False), (True, True)):
        group = me.group()
        steps += [me.agree(group, layouts, votes) for layouts in (same, union, union)]
    return steps


SCENARIOS = {
    "exchange then cache": _exchange_then_cache,
    "unions per group": _unions_per_group,
    "groups": _groups,
    "other layout": _other_layout,
    "most recent first": _most_recent_first,
    "votes": _votes,
}


def _run_scenarios(rank: int, world: int) -> dict[str, list]:
    me = _Rank(rank)
    return {name: scenario(me) for name, scenario in SCENARIOS.items()}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, list]]:
    results = run_ranks(_run_scenarios, 2, timeout=120)
    for name in SCENARIOS:  # both ranks saw the same agreements
        mine, theirs = ([step[:2] for step in r[name]] for r in results)
        assert mine == theirs, name
    return results


def _union_calls(steps: list) -> list[list[str]]:
    for keys, held_by_all, *_ in steps:
        assert len(keys) == 2 and keys[0].startswith("x") and keys[1].startswith("y")
        assert keys[0][1:] == keys[1][1:] and not held_by_all  # holders are counted
    return [calls for _, _, *calls in steps]


def test_equal_key_sets_agree_at_once_and_unequal_ones_exchange_then_use_the_cache(ranks):
    same, *unions = ranks[0]["exchange then cache"]
    keys, held_by_all, _, _, calls = same
    assert keys == ("a",) and held_by_all and calls == CHECK
    assert _union_calls(unions) == [EXCHANGE, CHECK]  # the proposals agree: no exchange


def test_a_group_remembers_its_last_unions_and_an_agreement_refreshes_one(ranks):
    calls = _union_calls(ranks[0]["unions per group"])
    assert calls[:CACHED_UNIONS] == [EXCHANGE] * CACHED_UNIONS
    assert calls[CACHED_UNIONS : CACHED_UNIONS + 4] == [
        CHECK,  # union 0: the oldest, now the most recent
        EXCHANGE,  # one union more: union 1 is forgotten
        CHECK,  # union 0 again
        EXCHANGE,  # union 1, agreed anew (union 2 forgotten)
    ]
    assert calls[CACHED_UNIONS + 4 :] == [CHECK] * (CACHED_UNIONS - 1)


def test_the_cache_keeps_the_most_recently_agreed_groups(ranks):
    calls = _union_calls(ranks[0]["groups"])
    assert calls[:CACHED_GROUPS] == [EXCHANGE] * CACHED_GROUPS
    assert calls[CACHED_GROUPS:] == [
        CHECK,  # the first group: the least recently agreed, now the most recent
        EXCHANGE,  # one group more: the second is forgotten
        EXCHANGE,  # the second, agreed anew
        CHECK,  # the first is still there
    ]


def test_a_cached_union_is_not_proposed_for_a_key_of_another_layout(ranks):
    for steps in (r["other layout"] for r in ranks):
        assert _union_calls(steps[:1]) == [EXCHANGE]
        keys, _, layouts, _, calls = steps[1]
        assert keys == ("x0", "y0") and layouts["x0"] == OTHER and calls == EXCHANGE


def test_of_two_cached_unions_that_cover_the_keys_the_most_recent_is_proposed(ranks):
    steps = ranks[0]["most recent first"]
    assert [keys for keys, *_ in steps] == [("x0", "y0"), ("x0", "y0", "z0"), ("x0", "y0", "z0")]
    assert [calls for *_, calls in steps] == [EXCHANGE, EXCHANGE, CHECK]


def test_any_ranks_vote_is_every_ranks_answer_on_each_path(ranks):
    votes = ((False, False), (False, True), (True, False), (True, True))
    paths = (("same keys", CHECK), ("exchange", EXCHANGE), ("cached", CHECK))
    for n, vote in enumerate(votes):
        for p, (path, calls) in enumerate(paths):
            steps = [r["votes"][3 * n + p] for r in ranks]
            assert steps[0][4] == calls, (path, vote)
            assert [voted for _, _, _, voted, _ in steps] == [any(vote)] * 2, (path, vote)


def test_a_single_rank_agrees_with_itself_without_a_collective(monkeypatch):
    def no_collective(*args, **kwargs):
        raise AssertionError("a single rank made a collective")

    for name in ("all_reduce", "all_gather_object"):
        monkeypatch.setattr(dist, name, no_collective)
    keys, voted = agree(Comm(None), {"b": ONE, "a": ONE}, vote=True)
    assert keys.keys == ("a", "b") and voted is True
