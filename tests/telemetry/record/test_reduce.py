"""The coalesced DP reduction on 2 and 4 gloo ranks against a pooled numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.model.snapshot import StatReduce
from telemetry.record import reduce
from telemetry.record.layout import (
    DENOMINATOR_LAYOUT,
    SCALAR_LAYOUT,
    ReduceOp,
    StateKind,
    StateLayout,
    stat_layout,
)
from telemetry.record.reduce import collectives_issued, reduce_states, reduce_with_spread
from tests.distributed import run_ranks


def rank_data(rank: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic per-rank data with very unequal valid counts."""
    rng = np.random.default_rng(rank * 7919 + len(key))
    n = 5 + 40 * rank
    values = rng.normal(size=(3, n))
    mask = rng.random((3, n)) < (0.2 + 0.2 * rank)
    return values, mask


def _record_and_export(rank: int, world: int, keys_by_rank: dict[int, list[str]]):
    from telemetry import stats_tracker

    tracker = stats_tracker.DistributedStatsTracker()
    for key in keys_by_rank[rank]:
        values, mask = rank_data(rank, key)
        with tracker.scope("ppo_actor"):
            tracker.denominator(valid=torch.from_numpy(mask))
            tracker.stat(**{key: torch.from_numpy(values)}, denominator="valid")
            tracker.scalar(**{f"{key}_lr": float(rank + 1)})
    before = collectives_issued()
    out = tracker.export(reduce_group=dist.group.WORLD)
    return dict(out), collectives_issued() - before


def pooled_reference(world: int, keys_by_rank: dict[int, list[str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    all_keys = sorted({k for keys in keys_by_rank.values() for k in keys})
    for key in all_keys:
        picked = [rank_data(r, key) for r in range(world) if key in keys_by_rank[r]]
        x = np.concatenate([v[m] for v, m in picked])
        out[f"ppo_actor/{key}/avg"] = x.sum() / x.size
        out[f"ppo_actor/{key}/min"] = x.min()
        out[f"ppo_actor/{key}/max"] = x.max()
        lrs = [float(r + 1) for r in range(world) if key in keys_by_rank[r]]
        out[f"ppo_actor/{key}_lr"] = sum(lrs) / len(lrs)
        out[f"ppo_actor/{key}_lr__count"] = len(lrs)
    valid = sum(int(rank_data(r, k)[1].sum()) for r in range(world) for k in keys_by_rank[r])
    out["ppo_actor/valid"] = valid
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_same_keys_on_every_rank_three_collectives(world):
    keys_by_rank = {r: ["loss", "entropy"] for r in range(world)}
    results = run_ranks(_record_and_export, world, keys_by_rank)
    expected = pooled_reference(world, keys_by_rank)
    for out, collectives in results:
        assert set(out) == set(expected)
        for key, value in expected.items():
            assert out[key] == pytest.approx(value, rel=1e-12), key
        assert collectives == 3  # the agreement check, SUM, MIN
    assert all(out == results[0][0] for out, _ in results)  # bit-identical on every rank


@pytest.mark.parametrize("world", [2, 4])
def test_different_key_sets_agree_on_the_union(world):
    keys_by_rank = {r: ["loss"] + (["only_odd"] if r % 2 else []) for r in range(world)}
    keys_by_rank[0] = []  # rank 0 recorded nothing at all
    results = run_ranks(_record_and_export, world, keys_by_rank)
    expected = pooled_reference(world, keys_by_rank)
    for out, collectives in results:
        assert set(out) == set(expected)
        for key, value in expected.items():
            assert out[key] == pytest.approx(value, rel=1e-12), key
        assert collectives == 5  # the check, the layouts (2), SUM, MIN


def _mismatch(tracker) -> str | None:
    """The KeyMismatchError an export raises, as text; None when it succeeds."""
    try:
        tracker.export(reduce_group=dist.group.WORLD)
    except KeyMismatchError as exc:
        return str(exc)
    return None


def _conflicting_reduce_types(rank: int, world: int):
    from telemetry.stats_tracker import DistributedStatsTracker, ReduceType

    tracker = DistributedStatsTracker()
    tracker.denominator(valid=torch.ones(4, dtype=torch.bool))
    reduce = ReduceType.SUM if rank == 1 else ReduceType.AVG
    tracker.stat(x=torch.ones(4), denominator="valid", reduce_type=reduce)
    tracker.stat(fine=torch.ones(4), denominator="valid")
    return _mismatch(tracker)


def test_reduce_type_conflict_raises_on_every_rank():
    messages = run_ranks(_conflicting_reduce_types, 2)
    for message in messages:
        assert message is not None
        assert "'x'" in message
        assert "stat(reduce=avg, buckets=0)" in message
        assert "stat(reduce=sum, buckets=0)" in message
        assert "fine" not in message


def _nan_on_one_rank(rank: int, world: int):
    from telemetry.stats_tracker import DistributedStatsTracker

    tracker = DistributedStatsTracker()
    x = torch.tensor([1.0, 2.0]) if rank else torch.tensor([float("nan"), 2.0])
    tracker.denominator(valid=torch.ones(2, dtype=torch.bool))
    tracker.stat(x=x, denominator="valid")
    return dict(tracker.export(reduce_group=dist.group.WORLD))


def test_nan_on_one_rank_propagates_everywhere():
    for out in run_ranks(_nan_on_one_rank, 2):
        assert all(math.isnan(out[f"x/{f}"]) for f in ("avg", "min", "max"))


def _raw_states(rank: int, world: int):
    layout = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX))
    states = {
        "k": (layout, torch.tensor([rank + 1.0, 10.0 - rank, float(rank)], dtype=torch.float64))
    }
    if rank == world - 1:
        states["last_only"] = (layout, torch.tensor([5.0, -1.0, 9.0], dtype=torch.float64))
    return {k: v.tolist() for k, (_, v) in reduce_states(states, dist.group.WORLD).items()}


def test_raw_state_ops_and_identity_for_missing_keys():
    world = 4
    for out in run_ranks(_raw_states, world):
        assert out["k"] == [sum(range(1, world + 1)), 10.0 - (world - 1), world - 1.0]
        assert out["last_only"] == [5.0, -1.0, 9.0]


def test_single_process_has_no_collectives():
    layout = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,))
    before = collectives_issued()
    out = reduce_states({"a": (layout, torch.tensor([2.0], dtype=torch.float64))})
    assert out["a"][0] is layout and out["a"][1].tolist() == [2.0]
    assert collectives_issued() == before


def test_single_process_reduces_a_0_dim_and_a_2_dim_state_as_flat_vectors():
    one = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,))
    four = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.SUM))
    out = reduce_states(
        {
            "scalar": (one, torch.tensor(2.5, dtype=torch.float64)),
            "grid": (four, torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)),
        }
    )
    assert out["scalar"][1].tolist() == [2.5]
    assert out["grid"][1].tolist() == [1.0, 2.0, 3.0, 4.0]  # row-major, as the layout's ops


def test_single_process_plan_cache_keeps_the_most_recently_used_key_sets():
    layout = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,))

    def key_set(i: int) -> dict:
        return {f"plan{i}.{j}": (layout, torch.tensor([1.0], dtype=torch.float64)) for j in (0, 1)}

    def cached() -> list[tuple]:
        return [tuple(plan.offsets) for plan in reduce._plans.values()]

    size = reduce._PLANS
    for i in range(size + 3):
        reduce_states(key_set(i))
    assert cached() == [tuple(key_set(i)) for i in range(3, size + 3)]
    reduce_states(key_set(3))  # used again: now the most recent
    reduce_states(key_set(size + 3))  # one more: key set 4 is forgotten
    assert cached() == [tuple(key_set(i)) for i in (*range(5, size + 3), 3, size + 3)]


def test_wrong_state_size_is_rejected():
    layout = StateLayout(StateKind.CUSTOM, (ReduceOp.SUM, ReduceOp.SUM))
    with pytest.raises(KeyMismatchError, match="'a'"):
        reduce_states({"a": (layout, torch.zeros(3, dtype=torch.float64))})


def _bounds_on_rank_one_only(rank: int, world: int):
    from telemetry.stats_tracker import DistributedStatsTracker

    tracker = DistributedStatsTracker()
    if rank == 1:
        tracker.set_bucket_bounds("x", [0.0, 1.0])
    tracker.denominator(valid=torch.ones(3, dtype=torch.bool))
    tracker.stat(x=torch.tensor([-1.0, 0.5, 2.0]), denominator="valid")
    return _mismatch(tracker)


def test_bucket_bounds_on_some_ranks_only_is_a_layout_conflict():
    for message in run_ranks(_bounds_on_rank_one_only, 2):
        assert message is not None and "'x'" in message
        assert "buckets=3" in message and "buckets=0" in message


def _scalar_here_stat_there(rank: int, world: int):
    from telemetry.stats_tracker import DistributedStatsTracker

    tracker = DistributedStatsTracker()
    if rank == 0:
        tracker.scalar(x=1.0)
    else:
        tracker.denominator(valid=torch.ones(2, dtype=torch.bool))
        tracker.stat(x=torch.ones(2), denominator="valid")
    return _mismatch(tracker)


def test_scalar_on_one_rank_and_stat_on_another_is_a_layout_conflict():
    for message in run_ranks(_scalar_here_stat_there, 2):
        assert message is not None and "'x'" in message
        assert "scalar" in message and "stat(reduce=avg_min_max, buckets=0)" in message


def test_layout_descriptions_tell_every_layout_apart():
    layouts = [
        SCALAR_LAYOUT,
        DENOMINATOR_LAYOUT,
        StateLayout(StateKind.CUSTOM, (ReduceOp.SUM,)),
        StateLayout(StateKind.CUSTOM, (ReduceOp.MAX,)),
        StateLayout(StateKind.CUSTOM, (ReduceOp.SUM, ReduceOp.SUM)),
        *(
            stat_layout(reduce, n)
            for reduce in StatReduce
            if reduce is not StatReduce.SCALAR
            for n in (0, 1, 4)
        ),
    ]
    assert len({layout.description for layout in layouts}) == len(layouts)
    assert stat_layout(StatReduce.AVG, 3).n_buckets == 3
    assert stat_layout(StatReduce.AVG, 3).ops[4:] == (ReduceOp.SUM,) * 3


@pytest.mark.parametrize(
    "kind, ops, reduce",
    [
        (StateKind.STAT, SCALAR_LAYOUT.ops, None),  # a stat needs its reduce type
        (StateKind.STAT, SCALAR_LAYOUT.ops, StatReduce.SCALAR),  # scalar is not a stat's
        (StateKind.STAT, (ReduceOp.SUM,) * 4, StatReduce.AVG),  # not [sum, count, min, -max]
        (StateKind.STAT, (*SCALAR_LAYOUT.ops, ReduceOp.MIN), StatReduce.AVG),  # a bucket is a sum
        (StateKind.SCALAR, SCALAR_LAYOUT.ops, StatReduce.AVG),  # only a stat has a reduce type
        (StateKind.DENOMINATOR, (ReduceOp.SUM, ReduceOp.SUM), None),
        ("stat", SCALAR_LAYOUT.ops, StatReduce.AVG),  # a kind is a StateKind, not a string
    ],
)
def test_inconsistent_layouts_are_refused(kind, ops, reduce):
    with pytest.raises(ValueError):
        StateLayout(kind, ops, reduce=reduce)


def _timing_on_rank_one_only(rank: int, world: int):
    from telemetry.stats_tracker import DistributedStatsTracker

    tracker = DistributedStatsTracker()
    if rank == 1:
        tracker.scalar(**{"timeperf/step": 2.0})
    states = tracker.collect().states
    reduced, spreads = reduce_with_spread(states, dist.group.WORLD, spread=lambda key: True)
    return {k: v.tolist() for k, (_, v) in reduced.items()}, {
        k: {q: (s.low, s.high, s.slowest_rank) for q, s in by.items()} for k, by in spreads.items()
    }


def test_a_key_missing_on_a_rank_gets_the_holders_layout_with_its_per_rank_spread():
    results = run_ranks(_timing_on_rank_one_only, 2)
    assert results[0] == results[1]
    reduced, spreads = results[0]
    assert reduced == {"timeperf/step": [2.0, 1.0, 2.0, -2.0]}
    assert spreads == {"timeperf/step": {"": (2.0, 2.0, 1)}}
