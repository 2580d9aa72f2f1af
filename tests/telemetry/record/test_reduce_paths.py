"""Every path of the DP reduction against a numpy reference over the ranks' own states.

One 2-rank gloo run goes through the agreed-key path (3 collectives: the agreement
check, SUM, MIN), the union path (5: the layouts exchanged as well; keys missing on some
ranks filled with the identity, the holder's layout adopted), a layout conflict, a window
where no rank recorded anything, and the straggler view with its denominators and
presence flags; the single-process tests pin the same arithmetic where no collective
runs. (One spawn keeps this cheap enough to run per mutant:
``scripts/mutation``.)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record.layout import (
    DENOMINATOR_LAYOUT,
    SCALAR_LAYOUT,
    PerRank,
    ReduceOp,
    StateKind,
    StateLayout,
)
from telemetry.record.reduce import RankSpread, collectives_issued, reduce_with_spread
from tests.distributed import run_ranks

WORLD = 2
INF = math.inf
SUM, MIN, MAX = ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX
MIXED = StateLayout(StateKind.CUSTOM, (SUM, MIN, MAX))
REVERSED = StateLayout(StateKind.CUSTOM, (MAX, SUM, MIN))
# A rate without a presence flag, and a presence flag without a denominator.
RATE = StateLayout(StateKind.CUSTOM, (SUM, SUM), (PerRank("rate", 0, 1), PerRank("n", 0, None, 1)))

# key -> (layout, one row of values per rank); None: the rank does not hold the key.
SAME_KEYS = {
    "a": (MIXED, [[1.5, 3.0, 0.5], [-2.0, -1.0, 9.0], [4.25, 7.0, -3.0]]),
    "b": (REVERSED, [[2.0, 1.0, 8.0], [5.0, 2.0, -4.0], [-1.0, 0.5, 6.0]]),
    "s": (SCALAR_LAYOUT, [[2.0, 1.0, 2.0, -2.0], [9.0, 3.0, 1.0, -5.0], [0.0, 0.0, INF, INF]]),
    "t": (SCALAR_LAYOUT, [[3.0, 1.0, 3.0, -3.0], [8.0, 2.0, 3.0, -5.0], [1.0, 1.0, 1.0, -1.0]]),
    "d": (DENOMINATOR_LAYOUT, [[4.0], [0.0], [6.0]]),
    "r": (RATE, [[3.0, 2.0], [5.0, 0.0], [2.0, 4.0]]),
}
SOME_KEYS = {
    "a": (MIXED, [[1.0, 2.0, 3.0], [4.0, 0.0, 1.0], [2.0, 5.0, 0.0]]),
    "only0": (REVERSED, [[7.0, 2.5, -1.0], None, None]),
    "s": (SCALAR_LAYOUT, [None, [6.0, 2.0, 1.0, -5.0], None]),
    "z": (MIXED, [None, [1.0, 1.0, 1.0], [2.0, -2.0, 4.0]]),
}
# Disjoint single keys of one size: the headers differ only in the digest of the keys.
DISJOINT = {"q": (StateLayout(StateKind.CUSTOM, (SUM,)), [[1.0], None])}
DISJOINT["p"] = (DISJOINT["q"][0], [None, [2.0]])
SPREAD = {"s", "d", "r"}  # "t" has per-rank quantities too, but is not asked for


def states_of(rank: int, table: dict) -> dict:
    return {
        key: (layout, torch.tensor(rows[rank], dtype=torch.float64))
        for key, (layout, rows) in table.items()
        if rows[rank] is not None
    }


def plain(result) -> tuple:
    reduced, spreads = result
    return (
        {key: (layout.description, values.tolist()) for key, (layout, values) in reduced.items()},
        {
            key: {q: (s.low, s.high, s.slowest_rank, list(s.top)) for q, s in by.items()}
            for key, by in spreads.items()
        },
    )


def _every_path(rank: int, world: int) -> dict:
    out = {"issued_before": collectives_issued()}  # a fresh process: none yet
    cases = (("same", SAME_KEYS), ("some", SOME_KEYS), ("disjoint", DISJOINT), ("none", {}))
    for name, table in cases:
        before = collectives_issued()
        result = reduce_with_spread(
            states_of(rank, table), dist.group.WORLD, spread=SPREAD.__contains__
        )
        out[name] = (plain(result), collectives_issued() - before)
    fine = (MIXED, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    # "x" and "y" differ in both orders (the first rank's description sorting after, then
    # before, the second's); "fine" agrees.
    x = StateLayout(StateKind.CUSTOM, (SUM,) if rank == 0 else (MAX,))
    y = StateLayout(StateKind.CUSTOM, (MAX,) if rank == 0 else (SUM,))
    one = torch.ones(1, dtype=torch.float64)
    try:
        reduce_with_spread({"x": (x, one), "y": (y, one), "fine": fine}, dist.group.WORLD)
        out["conflict"] = None
    except KeyMismatchError as exc:
        out["conflict"] = str(exc)
    return out


def reference(table: dict, world: int) -> tuple:
    """Each element reduced by its op over the ranks holding the key; the spreads."""
    reduced, spreads = {}, {}
    for key in sorted(table):
        layout, rows = table[key]
        held = np.array([row for row in rows[:world] if row is not None])
        ops = {SUM: np.sum, MIN: np.min, MAX: np.max}
        reduced[key] = (
            layout.description,
            [float(ops[op](held[:, i])) for i, op in enumerate(layout.ops)],
        )
        if key not in SPREAD or not layout.per_rank:
            continue
        for quantity in layout.per_rank:
            values = []
            for row in rows[:world]:
                if row is None:
                    row = [float(layout.identity()[i]) for i in range(len(layout.ops))]
                value = row[quantity.numerator]
                if quantity.denominator is not None:
                    count = row[quantity.denominator]
                    value = value / count if count > 0 else math.nan
                if quantity.present is not None and not row[quantity.present] > 0:
                    value = math.nan
                values.append(value)
            known = [(rank, v) for rank, v in enumerate(values) if not math.isnan(v)]
            if known:
                top = sorted(known, key=lambda rv: (-rv[1], rv[0])) if world > 1 else []
                low, high = min(v for _, v in known), max(v for _, v in known)
                slowest = values.index(high)
                spreads.setdefault(key, {})[quantity.suffix] = (low, high, slowest, top)
    return reduced, spreads


def same_with_nan(a, b) -> bool:
    """Equality where NaN equals NaN (per-rank values of ranks without the quantity)."""
    return repr(a) == repr(b)


def test_the_reference_itself_on_hand_computed_values():
    # The reference above, checked by hand on the agreed-key table.
    reduced, spreads = reference(SAME_KEYS, 3)
    assert reduced["a"][1] == [3.75, -1.0, 9.0]
    assert reduced["b"][1] == [5.0, 3.5, -4.0]
    assert spreads["s"] == {"": (2.0, 3.0, 1, [(1, 3.0), (0, 2.0)])}
    assert spreads["r"]["rate"] == (0.5, 1.5, 0, [(0, 1.5), (2, 0.5)])
    assert spreads["r"]["n"] == (2.0, 3.0, 0, [(0, 3.0), (2, 2.0)])
    assert spreads["d"] == {"": (0.0, 6.0, 2, [(2, 6.0), (0, 4.0), (1, 0.0)])}
    assert "t" not in spreads


@pytest.mark.parametrize("rank", range(3))
def test_one_rank_alone_reduces_to_its_own_state_with_no_collective(rank):
    before = collectives_issued()
    result = reduce_with_spread(states_of(rank, SAME_KEYS), spread=SPREAD.__contains__)
    assert collectives_issued() == before
    single = {key: (layout, [rows[rank]]) for key, (layout, rows) in SAME_KEYS.items()}
    assert same_with_nan(plain(result), reference(single, 1))


def test_a_state_of_the_wrong_size_is_refused_whether_short_or_long():
    for n in (2, 4):
        with pytest.raises(KeyMismatchError, match="'a'"):
            reduce_with_spread({"a": (MIXED, torch.zeros(n, dtype=torch.float64))})


def test_the_spread_of_a_key_after_others_reads_its_own_columns():
    table = {"a": SAME_KEYS["a"], "s": SAME_KEYS["s"]}  # "s" starts at column 3
    result = reduce_with_spread(states_of(0, table), spread=lambda key: key == "s")
    single = {key: (layout, [rows[0]]) for key, (layout, rows) in table.items()}
    assert same_with_nan(plain(result), reference(single, 1))
    assert plain(result)[1] == {"s": {"": (2.0, 2.0, 0, [])}}  # no top k on one rank


def test_a_state_of_more_than_256_elements_is_reduced():
    wide = StateLayout(StateKind.CUSTOM, (SUM,) * 300)
    values = torch.arange(300, dtype=torch.float64)
    reduced, _ = reduce_with_spread({"w": (wide, values)})
    assert reduced["w"][1].tolist() == values.tolist()


def test_a_rank_spread_is_an_immutable_value():
    spread = RankSpread(1.0, 2.0, 1, (1.0, 2.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spread.low = 0.0
    assert hash(spread) == hash(RankSpread(1.0, 2.0, 1, (1.0, 2.0)))


def test_a_per_rank_quantity_reads_its_own_element_of_a_key_after_others():
    second = StateLayout(StateKind.CUSTOM, (SUM, SUM), (PerRank("second", 1),))
    states = {
        "a": (MIXED, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)),
        "q": (second, torch.tensor([7.0, 5.0], dtype=torch.float64)),  # columns 3 and 4
    }
    _, spreads = reduce_with_spread(states, spread=lambda key: True)
    assert plain(({}, spreads))[1] == {"q": {"second": (5.0, 5.0, 0, [])}}


def test_a_rank_whose_denominator_or_presence_is_not_positive_has_no_value():
    # RATE divides by element 1 ("rate") and needs it positive ("n"): -1 is neither.
    state = {"r": (RATE, torch.tensor([3.0, -1.0], dtype=torch.float64))}
    assert reduce_with_spread(state, spread=lambda key: True) == (
        {"r": (RATE, pytest.approx([3.0, -1.0]))},
        {},
    )


def test_a_single_process_with_nothing_recorded_reduces_to_nothing():
    assert reduce_with_spread({}, spread=lambda key: True) == ({}, {})


def test_every_path_on_two_gloo_ranks_against_the_reference():
    results = run_ranks(_every_path, WORLD, timeout=120)
    for result in results:
        assert same_with_nan(result["same"], (reference(SAME_KEYS, WORLD), 3))
        assert same_with_nan(result["some"], (reference(SOME_KEYS, WORLD), 5))
        # sums only: no MIN all-reduce
        assert same_with_nan(result["disjoint"], (reference(DISJOINT, WORLD), 4))
        assert result["none"] == (({}, {}), 1)  # the check says nobody has anything
        message = result["conflict"]
        assert message is not None and "'x'" in message and "fine" not in message
        assert "'y'" in message and "custom[sum]" in message and "custom[max]" in message
        assert result["issued_before"] == 0
    assert all(same_with_nan(r, results[0]) for r in results)  # every rank agrees
