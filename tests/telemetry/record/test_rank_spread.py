"""The straggler view: per-rank min, max and slowest rank inside the same reduction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.snapshot import Gauge
from telemetry.record import rank_spread
from telemetry.record.layout import SCALAR_LAYOUT, PerRank, ReduceOp, StateKind, StateLayout
from telemetry.record.reduce import reduce_with_spread
from tests.distributed import run_ranks

SLOW_RANK = 2
SECONDS = {0: 0.01, 1: 0.02, 2: 0.25, 3: 0.03}


def _four_ranks(rank: int, world: int) -> dict:
    from telemetry import stats_tracker
    from telemetry.record.reduce import collectives_issued

    rank_spread.rank_series("timeperf/train_step")
    tracker = stats_tracker.get("")
    stats_tracker.export_all(reduce_group=dist.group.WORLD)  # start from an empty window
    for share in (0.25, 0.75):  # two timings in the window: the rank's mean is its seconds
        tracker.scalar(**{"timeperf/train_step": SECONDS[rank] * 2 * share})
    tracker.scalar(loss=float(rank))  # not tracked: no spread
    before = collectives_issued()
    out = stats_tracker.export_all(reduce_group=dist.group.WORLD)
    return {"stats": dict(out), "collectives": collectives_issued() - before}


def test_four_gloo_ranks_name_the_slow_rank_and_the_first_rank_gets_the_series():
    results = run_ranks(_four_ranks, 4, timeout=120)
    key = "timeperf/train_step"
    per_rank = {f"{key}/rank_{r}/per_rank": SECONDS[r] for r in range(4)}
    ranked = sorted(SECONDS, key=lambda r: -SECONDS[r])
    for rank, result in enumerate(results):
        stats = result["stats"]
        # the check, SUM, MIN (the view in them), and the gather of the asked series
        assert result["collectives"] == 4
        assert stats[f"{key}/slowest_rank"] == SLOW_RANK
        assert stats[f"{key}/rank_max"] == SECONDS[SLOW_RANK]
        assert stats[f"{key}/rank_min"] == SECONDS[0]
        assert stats[key] == pytest.approx(np.mean(list(SECONDS.values())), rel=1e-12)
        assert [stats[f"{key}/top_k/place_{i}/rank"] for i in range(1, 5)] == ranked
        assert [stats[f"{key}/top_k/place_{i}/value"] for i in range(1, 5)] == [
            SECONDS[r] for r in ranked
        ]
        assert stats[f"{key}/chronic/exports"] == 1
        assert not any(k.startswith("loss/") for k in stats)
        series = {k: v for k, v in stats.items() if "/per_rank" in k}
        assert series == (per_rank if rank == 0 else {})  # the committing rank only
        others = {k: v for k, v in results[0]["stats"].items() if "/per_rank" not in k}
        assert {k: v for k, v in stats.items() if k not in series} == others


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
    points = rank_spread.spread_points("train_perf", spread, TRAIN_PERF)
    assert points == [
        Gauge("train_perf/seconds/rank_min", 1.0, unit="s"),
        Gauge("train_perf/seconds/rank_max", 3.0, unit="s"),
        Gauge("train_perf/seconds/slowest_rank", 5.0),
    ]


TRAIN_PERF = StateLayout(
    StateKind.CUSTOM,
    (ReduceOp.SUM, ReduceOp.SUM, ReduceOp.MAX),
    (PerRank("tokens", 1, present=0), PerRank("seconds", 2, present=0, unit="s")),
)


@pytest.mark.parametrize(
    ("key", "suffix", "unit"),
    [
        ("timeperf/step", "", "s"),  # a timing: the key's unit (stats.key_unit)
        ("ppo_actor/timeperf/update", "", "s"),
        ("ppo_actor/step_seconds", "", ""),  # not a timing: no unit, as the key itself
        ("train_perf", "tokens", ""),  # a quantity without a unit of its own: the key's
        ("train_perf", "seconds", "s"),  # the unit its PerRank declares
    ],
)
def test_a_spread_has_its_quantitys_unit_else_the_keys(key, suffix, unit):
    layout = TRAIN_PERF if suffix else SCALAR_LAYOUT
    points = rank_spread.spread_points(key, {suffix: rank_spread.RankSpread(1.0, 2.0, 0)}, layout)
    assert [p.unit for p in points] == [unit, unit, ""]


def test_per_rank_series_and_the_top_k_points():
    spread = rank_spread.RankSpread(
        1.0,
        3.0,
        1,
        values=(1.0, 3.0, float("nan")),
        top=((1, 3.0), (0, 1.0)),
        chronic=((1, 7), (0, 2)),
        exports=9,
    )
    points = rank_spread.spread_points("timeperf/x", {"": spread}, SCALAR_LAYOUT)
    assert [(p.key, p.value, p.unit) for p in points[3:]] == [
        ("timeperf/x/top_k/place_1/rank", 1.0, ""),
        ("timeperf/x/top_k/place_1/value", 3.0, "s"),
        ("timeperf/x/top_k/place_2/rank", 0.0, ""),
        ("timeperf/x/top_k/place_2/value", 1.0, "s"),
        ("timeperf/x/chronic/place_1/rank", 1.0, ""),
        ("timeperf/x/chronic/place_1/top_k_exports", 7.0, ""),
        ("timeperf/x/chronic/place_2/rank", 0.0, ""),
        ("timeperf/x/chronic/place_2/top_k_exports", 2.0, ""),
        ("timeperf/x/chronic/exports", 9.0, ""),
        ("timeperf/x/rank_0/per_rank", 1.0, "s"),  # rank 2 had no value: no series
        ("timeperf/x/rank_1/per_rank", 3.0, "s"),
    ]
    assert points[3].metric == "timeperf/x/top_k/rank" and points[3].attributes == (("place", 1),)


def test_rank_series_patterns_are_tracked_and_can_be_stopped():
    assert not rank_spread.series("timeperf/x") and not rank_spread.tracked("other/x")
    rank_spread.rank_series("timeperf/x", "other/x")
    try:
        assert rank_spread.series("timeperf/x") and rank_spread.tracked("other/x")
    finally:
        rank_spread.rank_series("timeperf/x", "other/x", enabled=False)
        rank_spread.untrack_ranks("other/x")
    assert not rank_spread.series("timeperf/x") and not rank_spread.tracked("other/x")


def test_the_view_reaches_prometheus_as_one_family_per_name_labelled_by_place():
    from prometheus_client.parser import text_string_to_metric_families

    from exporters.prometheus.sink import PrometheusSink
    from telemetry.config import PrometheusConfig
    from telemetry.model.snapshot import Snapshot

    spread = rank_spread.RankSpread(
        1.0, 3.0, 1, values=(1.0, 3.0), top=((1, 3.0), (0, 1.0)), chronic=((1, 4),), exports=4
    )
    points = rank_spread.spread_points("train_perf", {"seconds": spread}, TRAIN_PERF)
    sink = PrometheusSink(PrometheusConfig(port=0), serve=False)
    try:
        sink.export(Snapshot(tuple(points)))
        body, _ = sink.render()
    finally:
        sink.shutdown()
    samples = {
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if k in ("place", "rank"))),
        ): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name.startswith("train_perf_")
    }
    base = "train_perf_seconds"
    assert samples == {
        (f"{base}_rank_min_seconds", ()): 1.0,
        (f"{base}_rank_max_seconds", ()): 3.0,
        (f"{base}_slowest_rank", ()): 1.0,
        (f"{base}_top_k_rank", (("place", "1"),)): 1.0,
        (f"{base}_top_k_rank", (("place", "2"),)): 0.0,
        (f"{base}_top_k_value_seconds", (("place", "1"),)): 3.0,
        (f"{base}_top_k_value_seconds", (("place", "2"),)): 1.0,
        (f"{base}_chronic_rank", (("place", "1"),)): 1.0,
        (f"{base}_chronic_top_k_exports", (("place", "1"),)): 4.0,
        (f"{base}_chronic_exports", ()): 4.0,
        (f"{base}_per_rank_seconds", (("rank", "0"),)): 1.0,
        (f"{base}_per_rank_seconds", (("rank", "1"),)): 3.0,
    }
