"""The key-set agreement of a reduction (``reduce.agree``) on two ranks in one process.

Each rank runs in a thread with a stand-in for the group (the ``Comm`` calls ``agree``
makes: a MIN all-reduce and an ``all_gather_object``, met by the other rank's), so the
cache of agreed unions, its bounds and the vote are checked in milliseconds, without
spawning (the multi-rank reduction itself: ``test_reduce_paths.py``, ``test_reduce_scale.py``).
The two ranks of a group share its cache entry, as every rank's cache is the same: each
reads it before the first collective, and neither writes it before both have met there.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from telemetry.record.layout import ReduceOp, StateKind, StateLayout
from telemetry.record.reduce import CACHED_GROUPS, CACHED_UNIONS, agree

ONE = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,))
OTHER = StateLayout(StateKind.CUSTOM, (ReduceOp.MAX,))
_groups = itertools.count(1 << 62)  # group keys no real group has (those are ids)


class _Rank:
    """One of two ranks of a group, for ``agree``: its calls meet the other rank's."""

    world = 2
    device = torch.device("cpu")

    def __init__(self, rank: int, key: int, meeting: list, barrier: threading.Barrier) -> None:
        self.rank, self.key = rank, key
        self._meeting, self._barrier = meeting, barrier
        self.calls: list[str] = []

    def _meet(self, mine: object) -> list:
        self._meeting[self.rank] = mine
        self._barrier.wait()
        both = list(self._meeting)
        self._barrier.wait()  # both have read before either writes again
        return both

    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
        assert op == dist.ReduceOp.MIN
        self.calls.append("all_reduce")
        return torch.minimum(*self._meet(tensor.clone()))

    def all_gather_object(self, obj: object) -> list[object]:
        self.calls.append("all_gather_object")
        return self._meet(obj)


def _agree(key: int, layouts: tuple[dict, dict], votes=(False, False)) -> list:
    """Both ranks' ``(agreed key set, voted, collectives made)`` from one agreement in
    group ``key``."""
    barrier = threading.Barrier(2, timeout=10)
    meeting: list = [None, None]
    ranks = [_Rank(r, key, meeting, barrier) for r in range(2)]
    with ThreadPoolExecutor(2) as pool:
        done = [pool.submit(agree, ranks[r], layouts[r], votes[r]) for r in range(2)]
        results = [future.result(timeout=10) for future in done]
    return [(agreed, voted, rank.calls) for (agreed, voted), rank in zip(results, ranks)]


def _union(key: int, i: int) -> list[str]:
    """Agree union ``i`` (rank 0 holds ``x<i>``, rank 1 ``y<i>``: no other union covers
    either); the collectives rank 0 made, after checking both ranks got the union."""
    results = _agree(key, ({f"x{i}": ONE}, {f"y{i}": ONE}))
    for agreed, _, _ in results:
        assert agreed.keys == (f"x{i}", f"y{i}")
        assert not agreed.held_by_all  # the reduction counts each key's holders
    return results[0][2]


CHECK = ["all_reduce"]  # the 40-byte check alone: equal key sets, or a cached union
EXCHANGE = [*CHECK, "all_gather_object"]  # then the layouts exchanged


def test_equal_key_sets_agree_at_once_and_unequal_ones_exchange_then_use_the_cache():
    group = next(_groups)
    for agreed, _, calls in _agree(group, ({"a": ONE}, {"a": ONE})):
        assert agreed.keys == ("a",) and agreed.held_by_all and calls == CHECK
    assert _union(group, 0) == EXCHANGE
    assert _union(group, 0) == CHECK  # the proposals agree: no exchange


def test_a_group_remembers_its_last_unions_and_an_agreement_refreshes_one():
    group = next(_groups)
    for i in range(CACHED_UNIONS):
        assert _union(group, i) == EXCHANGE, i
    assert _union(group, 0) == CHECK  # the oldest, now the most recent
    assert _union(group, CACHED_UNIONS) == EXCHANGE  # one more: union 1 is forgotten
    assert _union(group, 0) == CHECK
    assert _union(group, 1) == EXCHANGE
    for i in (0, *range(3, CACHED_UNIONS + 1)):
        assert _union(group, i) == CHECK, i


def test_the_cache_keeps_the_most_recently_agreed_groups():
    first, second, *others = [next(_groups) for _ in range(CACHED_GROUPS + 1)]
    assert _union(first, 0) == EXCHANGE
    assert _union(second, 0) == EXCHANGE
    for group in others[:-1]:  # CACHED_GROUPS groups in all
        assert _union(group, 0) == EXCHANGE
    assert _union(first, 0) == CHECK  # the least recently agreed, now the most recent
    assert _union(others[-1], 0) == EXCHANGE  # one group more: the second is forgotten
    assert _union(second, 0) == EXCHANGE
    assert _union(first, 0) == CHECK


def test_a_cached_union_is_not_proposed_for_a_key_of_another_layout():
    group = next(_groups)
    assert _union(group, 0) == EXCHANGE
    results = _agree(group, ({"x0": OTHER}, {"y0": ONE}))
    for agreed, _, calls in results:
        assert agreed.keys == ("x0", "y0") and agreed.layouts["x0"] == OTHER
        assert calls == EXCHANGE


def test_any_ranks_vote_is_every_ranks_answer_on_each_path():
    same, union = ({"a": ONE}, {"a": ONE}), ({"x0": ONE}, {"y0": ONE})
    paths = (("same keys", same, CHECK), ("exchange", union, EXCHANGE), ("cached", union, CHECK))
    for votes in ((False, False), (False, True), (True, False), (True, True)):
        group = next(_groups)
        for path, layouts, calls in paths:
            results = _agree(group, layouts, votes)
            assert results[0][2] == calls, (path, votes)
            assert [voted for _, voted, _ in results] == [any(votes)] * 2, (path, votes)


def test_a_single_rank_agrees_with_itself_without_a_collective():
    rank = _Rank(0, next(_groups), [None], threading.Barrier(1))
    rank.world = 1
    keys, voted = agree(rank, {"b": ONE, "a": ONE}, vote=True)
    assert keys.keys == ("a", "b") and voted is True and rank.calls == []
