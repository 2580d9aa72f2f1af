"""The straggler view: per-rank min, max and slowest rank inside the same reduction."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.snapshot import Gauge
from telemetry.record import rank_spread
from telemetry.record.layout import PerRank, ReduceOp, StateKind, StateLayout
from telemetry.record.reduce import reduce_with_spread
from tests.distributed import run_ranks

SLOW_RANK = 2


def _four_ranks(rank: int, world: int) -> dict:
    from telemetry import stats_tracker
    from telemetry.record.reduce import collectives_issued

    rank_spread.rank_series("timeperf/train_step")
    tracker = stats_tracker.get("")
    stats_tracker.export_all(reduce_group=dist.group.WORLD)  # start from an empty window
    delays = {0: 0.01, 1: 0.02, 2: 0.25, 3: 0.03}
    with tracker.record_timing("train_step"):
        time.sleep(delays[rank])
    tracker.scalar(loss=float(rank))  # not tracked: no spread
    before = collectives_issued()
    out = stats_tracker.export_all(reduce_group=dist.group.WORLD)
    return {"stats": dict(out), "collectives": collectives_issued() - before}


def test_four_gloo_ranks_name_the_slow_rank_with_no_extra_collective():
    results = run_ranks(_four_ranks, 4, timeout=120)
    for result in results:
        stats = result["stats"]
        assert result["collectives"] == 2  # the header and the payload, as without the spread
        assert stats["timeperf/train_step/slowest_rank"] == SLOW_RANK
        assert 0.25 <= stats["timeperf/train_step/rank_max"] < 0.6
        assert 0.01 <= stats["timeperf/train_step/rank_min"] < 0.2
        assert stats["timeperf/train_step"] == pytest.approx(
            np.mean([r["stats"]["timeperf/train_step"] for r in results])
        )
        assert not any(k.startswith("loss/") for k in stats)
        assert stats == results[0]["stats"]  # every rank reports the same
        per_rank = [stats[f"timeperf/train_step/rank_{r}/per_rank"] for r in range(4)]
        assert max(per_rank) == per_rank[SLOW_RANK] == stats["timeperf/train_step/rank_max"]
        assert min(per_rank) == stats["timeperf/train_step/rank_min"]
        assert np.mean(per_rank) == pytest.approx(stats["timeperf/train_step"])


LAYOUT = StateLayout(
    StateKind.CUSTOM,
    (ReduceOp.SUM, ReduceOp.SUM),
    (PerRank("", 0, 1, present=1), PerRank("n", 1)),
)


def test_spread_ignores_ranks_without_the_quantity_and_is_off_unless_asked():
    state = {"k": (LAYOUT, torch.tensor([6.0, 3.0], dtype=torch.float64))}
    reduced, spreads = reduce_with_spread(state)
    assert spreads == {} and reduced["k"][1].tolist() == [6.0, 3.0]
    _, spreads = reduce_with_spread(state, spread=lambda key: key == "k")
    assert spreads["k"][""].low == spreads["k"][""].high == 2.0
    assert spreads["k"]["n"].slowest_rank == 0
    empty = {"k": (LAYOUT, torch.tensor([0.0, 0.0], dtype=torch.float64))}
    _, spreads = reduce_with_spread(empty, spread=lambda key: True)
    assert "" not in spreads["k"]  # no rank with a count: no mean to compare


def test_tracked_patterns_and_points():
    assert rank_spread.tracked("timeperf/rollout")
    assert rank_spread.tracked("ppo_actor/timeperf/update")
    assert rank_spread.tracked("train_perf")
    assert not rank_spread.tracked("ppo_actor/update/loss")
    rank_spread.track_ranks("ppo_actor/update/*")
    try:
        assert rank_spread.tracked("ppo_actor/update/loss")
    finally:
        rank_spread.untrack_ranks("ppo_actor/update/*")
    assert not rank_spread.tracked("ppo_actor/update/loss")
    spread = {"seconds": rank_spread.RankSpread(1.0, 3.0, 5)}
    points = rank_spread.spread_points("train_perf", spread)
    assert points == [
        Gauge("train_perf/seconds/rank_min", 1.0, unit="s"),
        Gauge("train_perf/seconds/rank_max", 3.0, unit="s"),
        Gauge("train_perf/seconds/slowest_rank", 5.0),
    ]


def test_per_rank_series_only_where_asked_and_bounded(caplog, monkeypatch):
    spread = {"": rank_spread.RankSpread(1.0, 3.0, 1, (1.0, 3.0, float("nan")))}
    assert [p.key for p in rank_spread.spread_points("timeperf/x", spread)] == [
        "timeperf/x/rank_min",
        "timeperf/x/rank_max",
        "timeperf/x/slowest_rank",
    ]
    rank_spread.rank_series("timeperf/x")
    try:
        points = rank_spread.spread_points("timeperf/x", spread)
        per_rank = [p for p in points if p.metric == "timeperf/x/per_rank"]
        assert [(p.attributes, p.value) for p in per_rank] == [
            ((("rank", 0),), 1.0),
            ((("rank", 1),), 3.0),  # rank 2 had no value: no series
        ]
        monkeypatch.setattr(rank_spread, "MAX_RANK_SERIES", 2)
        big = {"": rank_spread.RankSpread(1.0, 3.0, 1, (1.0, 3.0, 2.0))}
        points = rank_spread.spread_points("timeperf/x", big)
        assert len(points) == 3 and "per-rank series left out" in caplog.text
    finally:
        rank_spread.rank_series("timeperf/x", enabled=False)
    assert len(rank_spread.spread_points("timeperf/x", spread)) == 3


def test_per_rank_series_for_up_to_256_ranks_and_none_beyond(caplog):
    # The documented bound: jobs of at most 256 ranks get one series per rank.
    rank_spread.rank_series("timeperf/bound")
    try:
        for ranks, per_rank_series in ((256, 256), (257, 0)):
            values = tuple(float(r) for r in range(ranks))
            spread = {"": rank_spread.RankSpread(0.0, ranks - 1.0, ranks - 1, values)}
            points = rank_spread.spread_points("timeperf/bound", spread)
            per_rank = [p for p in points if p.metric == "timeperf/bound/per_rank"]
            assert len(per_rank) == per_rank_series, ranks
            assert len(points) == 3 + per_rank_series
        assert caplog.text.count("per-rank series left out") == 1  # only the 257-rank job
    finally:
        rank_spread.rank_series("timeperf/bound", enabled=False)
