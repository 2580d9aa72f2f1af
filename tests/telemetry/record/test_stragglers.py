"""The straggler view at any world size: top-k, rank extremes and chronic stragglers on 8 gloo
ranks against a numpy reference over every rank's value.

Slots smaller than the world (``straggler_view(slots=...)``) put several ranks in one slot,
as a job of thousands of ranks does with the default 64, so the naming rounds run here on
8 processes; adversarial layouts (the slowest ranks all in one slot, ties everywhere) need
more than one round and must still be exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.record import rank_spread
from telemetry.record.comm import collectives_issued
from telemetry.record.layout import PerRank, ReduceOp, StateKind, StateLayout
from telemetry.record.reduce import reduce_with_spread
from telemetry.record.stragglers import Settings
from tests.distributed import run_ranks

WORLD = 8
SUM = ReduceOp.SUM
# A rank's value is element 0 where element 1 (its presence) is positive.
TIMED = StateLayout(StateKind.CUSTOM, (SUM, SUM), (PerRank("", 0, present=1),))
TRIALS = 40


def table(trial: int) -> np.ndarray:
    """Every rank's value for one trial (NaN: the rank has none): few distinct values, so
    ties are everywhere, and every few trials the slowest ranks share a slot."""
    rng = np.random.default_rng(trial)
    values = rng.integers(0, 4, WORLD).astype(np.float64)
    if trial % 3 == 0:
        values[::2] += 10.0  # ranks 0, 2, 4, 6: one slot of 2, two slots of 3 hold none
    values[rng.random(WORLD) < 0.2] = np.nan
    return values


def reference_top(values: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k largest values, lowest rank first on ties (numpy's stable lexsort)."""
    ranks = np.flatnonzero(~np.isnan(values))
    order = np.lexsort((ranks, -values[ranks]))
    return [(int(ranks[i]), float(values[ranks[i]])) for i in order[:k]]


def state(value: float) -> dict:
    present = not math.isnan(value)
    row = [value if present else 0.0, 1.0 if present else 0.0]
    return {"t": (TIMED, torch.tensor(row, dtype=torch.float64))}


def view(spread) -> tuple:
    return spread.low, spread.high, spread.slowest_rank, list(spread.top)


CONFIGS = ((3, 2), (2, 3), (1, 5), (3, 64))  # (top_k, slots)


def _trials(rank: int, world: int) -> dict:
    out = {}
    for k, slots in CONFIGS:
        rank_spread.straggler_view(top_k=k, slots=slots)
        for trial in range(TRIALS):
            before = collectives_issued()
            _, spreads = reduce_with_spread(
                state(table(trial)[rank]), dist.group.WORLD, spread=lambda key: True
            )
            spread = spreads.get("t", {}).get("")
            out[k, slots, trial] = (view(spread) if spread else None, collectives_issued() - before)
    return out


def test_top_k_and_extremes_equal_the_reference_on_every_rank():
    results = run_ranks(_trials, WORLD, timeout=300)
    assert all(r == results[0] for r in results)  # the same on every rank
    for k, slots in CONFIGS:
        extra_rounds = 0
        for trial in range(TRIALS):
            got, collectives = results[0][k, slots, trial]
            values = table(trial)
            top = reference_top(values, k)
            if not top:
                assert got is None, trial
                continue
            known = values[~np.isnan(values)]
            assert got == (known.min(), known.max(), top[0][0], top), (k, slots, trial)
            # header, SUM, MIN; one naming round when slots hold several ranks; more only
            # when two of the k slowest share a slot
            base = 3 if slots >= WORLD else 4
            assert base <= collectives <= base + k - 1, (k, slots, trial)
            extra_rounds += collectives - base
        assert (extra_rounds > 0) == (slots < WORLD and k > 1), (k, slots)


def _known_slow_ranks() -> dict:
    from telemetry import stats_tracker

    rank = dist.get_rank()
    rank_spread.straggler_view(top_k=3, history=4, slots=2)
    out = {}
    for export in range(6):
        # rank 5 is always the slowest, rank 2 second; rank 7 is slow once; rank 0 has
        # no timing at all
        seconds = {5: 9.0, 2: 7.0, 7: 8.0 if export == 3 else 0.5}.get(rank, 1.0 + rank / 10)
        if rank != 0:
            stats_tracker.scalar(**{"timeperf/step": seconds})
        out[export] = dict(stats_tracker.export_all(reduce_group=dist.group.WORLD))
    return out


def test_known_slow_ranks_are_named_and_chronic_ones_told_from_one_offs(exports):
    results = [r["slow"] for r in exports]
    assert all(r == results[0] for r in results)
    last, once = results[0][5], results[0][3]
    base = "timeperf/step"
    assert (last[f"{base}/slowest_rank"], last[f"{base}/rank_max"]) == (5, 9.0)
    assert last[f"{base}/rank_min"] == 0.5  # rank 0 has none
    top = [
        (last[f"{base}/top_k/place_{i}/rank"], last[f"{base}/top_k/place_{i}/value"])
        for i in (1, 2, 3)
    ]
    assert top == [(5, 9.0), (2, 7.0), (6, 1.6)]
    assert [once[f"{base}/top_k/place_{i}/rank"] for i in (1, 2, 3)] == [5, 7, 2]
    # the last 4 exports (2..5): ranks 5 and 2 every time, rank 7 once, rank 6 three times
    chronic = [
        (last[f"{base}/chronic/place_{i}/rank"], last[f"{base}/chronic/place_{i}/top_k_exports"])
        for i in (1, 2, 3)
    ]
    assert chronic == [(2, 4), (5, 4), (6, 3)]
    assert last[f"{base}/chronic/exports"] == 4
    assert results[0][0][f"{base}/chronic/exports"] == 1
    assert f"{base}/top_k/place_4/rank" not in last


def _series() -> list:
    import logging

    from telemetry import stats_tracker

    rank = dist.get_rank()
    rank_spread.straggler_view(top_k=8, history=50, slots=64)  # the defaults again
    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("telemetry.record.stragglers").addHandler(handler)
    stats_tracker.rank_series("timeperf/*")
    out = []
    for max_series in (4096, 12):  # room for every key, then for one key of 8 ranks
        rank_spread.straggler_view(max_series=max_series)
        stats_tracker.scalar(**{"timeperf/a": float(rank), "timeperf/b": 2.0 * rank})
        if rank != 3:
            stats_tracker.scalar(**{"timeperf/c": 1.0})
        before = collectives_issued()
        stats = dict(stats_tracker.export_all(reduce_group=dist.group.WORLD))
        out.append((stats, collectives_issued() - before, list(warnings)))
    return out


def _exports(rank: int, world: int) -> dict:
    return {"slow": _known_slow_ranks(), "series": _series()}


@pytest.fixture(scope="module")
def exports() -> list[dict]:
    """One 8-rank run of both export sequences (each spawn of 8 processes costs ~30 s)."""
    return run_ranks(_exports, WORLD, timeout=180)


def test_per_rank_series_reach_the_first_rank_only_within_the_cap(exports):
    results = [r["series"] for r in exports]
    every = {f"timeperf/a/rank_{r}/per_rank": float(r) for r in range(WORLD)}
    first_key = dict(every)
    every |= {f"timeperf/b/rank_{r}/per_rank": 2.0 * r for r in range(WORLD)}
    every |= {f"timeperf/c/rank_{r}/per_rank": 1.0 for r in range(WORLD) if r != 3}
    for export, expected in enumerate((every, first_key)):
        first, collectives, warnings = results[0][export]
        per_rank = {k: v for k, v in first.items() if "/per_rank" in k}
        assert per_rank == expected
        # header, SUM, MIN, one gather of the asked values; rank 3 has no timeperf/c, so
        # the first export also exchanges layouts (2), the second reuses the agreed union
        assert collectives == (6, 4)[export]
        for other in results[1:]:
            stats, _, others_warnings = other[export]
            assert not any("/per_rank" in k for k in stats) and not others_warnings
            assert {k: v for k, v in first.items() if k not in per_rank} == stats
    warnings = results[0][1][2]
    assert len(warnings) == 2 and "timeperf/b" in warnings[0] and "timeperf/c" in warnings[1]
    assert warnings[0].startswith("key 'timeperf/b' of the default tracker: per-rank series")


def test_settings_are_checked():
    with pytest.raises(ValueError, match="top_k"):
        Settings(top_k=0)
    with pytest.raises(ValueError, match="slots"):
        Settings(slots=True)
