"""The all-reduce design on 2, 4 and 8 gloo ranks: values against a float64 numpy reference,
the same bits on every rank, bytes and collectives that do not grow with the world or the
key count, and the key-mismatch path with its cache of agreed unions.

Bytes are counted at the ``torch.distributed`` calls themselves (each rank wraps them):
what each call hands back to the rank.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.model.snapshot import StatReduce
from telemetry.record.layout import (
    DENOMINATOR_LAYOUT,
    SCALAR_LAYOUT,
    ReduceOp,
    StateKind,
    StateLayout,
    stat_layout,
)
from telemetry.record.reduce import reduce_states
from tests.distributed import Counted, run_ranks

SUM, MIN, MAX = ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX
LAYOUTS = (
    stat_layout(StatReduce.AVG_MIN_MAX, 2),
    SCALAR_LAYOUT,
    DENOMINATOR_LAYOUT,
    StateLayout(StateKind.CUSTOM, (SUM, MIN, MAX, MAX)),
)


def rows(key: int, world: int) -> np.ndarray:
    """Every rank's state of key ``key`` (the same on every rank that builds it): values of
    very different magnitudes, a NaN on one rank for some keys, infinities for others."""
    rng = np.random.default_rng(key)
    n = len(LAYOUTS[key % len(LAYOUTS)].ops)
    out = rng.normal(size=(world, n)) * 10.0 ** rng.integers(-3, 6, size=(world, n))
    if key % 7 == 3:
        out[rng.integers(world), rng.integers(n)] = np.nan
    if key % 11 == 5:
        out[rng.integers(world), rng.integers(n)] = rng.choice([np.inf, -np.inf])
    return out


def states(rank: int, world: int, keys: range, held=lambda rank, key: True) -> dict:
    return {
        f"k{key:04d}": (LAYOUTS[key % len(LAYOUTS)], torch.from_numpy(rows(key, world)[rank]))
        for key in keys
        if held(rank, key)
    }


def reference(world: int, keys: range, held=lambda rank, key: True) -> dict[str, np.ndarray]:
    """Each element reduced in float64 over the ranks holding the key; sums exactly
    rounded (math.fsum), so any summation order is within a few ulps of the sum's terms."""
    out = {}
    for key in keys:
        layout = LAYOUTS[key % len(LAYOUTS)]
        holders = [r for r in range(world) if held(r, key)]
        if not holders:
            continue
        table = rows(key, world)[holders]
        reduce = {SUM: lambda c: math.fsum(c), MIN: np.min, MAX: np.max}
        out[f"k{key:04d}"] = np.array([reduce[op](table[:, i]) for i, op in enumerate(layout.ops)])
    return out


def close(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> bool:
    """Equal up to float64 summation order: NaN where NaN, exact infinities, else within
    1e-12 of the magnitude of the terms."""
    nan = np.isnan(want)
    if not np.array_equal(np.isnan(got), nan):
        return False
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        ok = (got == want) | (np.abs(got - want) <= 1e-12 * scale)
    return bool(ok[~nan].all())


def plain(reduced: dict) -> dict[str, bytes]:
    return {key: values.tobytes() for key, (_, values) in reduced.items()}


def _scale(rank: int, world: int) -> dict:
    counted = Counted()
    out = {}
    for n in (8, 400):  # constant in the number of keys
        out[f"agreed{n}"] = (plain(reduce_states(states(rank, world, range(n)), dist.group.WORLD)),)
        out[f"agreed{n}"] += (counted.take(),)

    def rollout_on_odd_ranks(r, key):
        return key < 20 or r % 2 == 1

    for export in range(3):  # some ranks always hold keys the others do not
        reduced = reduce_states(
            states(rank, world, range(24), rollout_on_odd_ranks), dist.group.WORLD
        )
        out[f"steady{export}"] = (plain(reduced), counted.take())

    def changed(r, key):  # rank 1 starts a new key: one more exchange, then cached again
        return rollout_on_odd_ranks(r, key) and (key < 24 or r == 1)

    for export in range(2):
        reduced = reduce_states(states(rank, world, range(26), changed), dist.group.WORLD)
        out[f"changed{export}"] = (plain(reduced), counted.take())
    nothing = reduce_states(states(rank, world, range(6), lambda r, key: r != 0), dist.group.WORLD)
    out["rank0_empty"] = (plain(nothing), counted.take())
    conflict = states(rank, world, range(24), rollout_on_odd_ranks)
    if rank == world - 1:  # k0002 becomes a scalar on one rank, under a cached union
        conflict["k0002"] = (SCALAR_LAYOUT, torch.ones(4, dtype=torch.float64))
    try:
        reduce_states(conflict, dist.group.WORLD)
        out["conflict"] = None
    except KeyMismatchError as exc:
        out["conflict"] = str(exc)
    return out


@pytest.mark.parametrize("world", [2, 4, 8])
def test_values_bits_bytes_and_the_union_cache(world):
    results = run_ranks(_scale, world, timeout=240)
    first = results[0]
    for result in results[1:]:  # bit for bit on every rank
        for case in first:
            if case != "conflict":
                assert result[case][0] == first[case][0], case

    def check(case, keys, held=lambda rank, key: True):
        want = reference(world, keys, held)
        got = {k: np.frombuffer(v) for k, v in first[case][0].items()}
        assert got.keys() == want.keys(), case
        for key, values in want.items():
            terms = np.abs(rows(int(key[1:]), world)).sum(axis=0)
            assert close(got[key], values, terms), (case, key, got[key], values)

    check("agreed8", range(8))
    check("agreed400", range(400))
    check("steady0", range(24), lambda r, key: key < 20 or r % 2 == 1)
    check("rank0_empty", range(6), lambda r, key: r != 0)
    for n in (8, 400):  # the check, SUM, MIN: 40 bytes back, then the reduced vectors
        ops = [op for k in range(n) for op in LAYOUTS[k % len(LAYOUTS)].ops]
        assert first[f"agreed{n}"][1] == [
            ("all_reduce", 40),
            ("all_reduce", 8 * ops.count(SUM)),
            ("all_reduce", 8 * (len(ops) - ops.count(SUM))),
        ]  # whatever the world size
    names = {case: [c for c, _ in first[case][1]] for case in first if case != "conflict"}
    exchange = ["all_reduce", "all_gather_object", "all_reduce", "all_reduce"]
    cached = ["all_reduce"] * 3  # the check, SUM with the holder counts, MIN
    assert names["steady0"] == exchange
    assert names["steady1"] == names["steady2"] == cached
    assert names["changed0"] == exchange and names["changed1"] == cached
    message = first["conflict"]
    assert all(r["conflict"] == message for r in results)
    assert "'k0002'" in message and "scalar" in message and "denominator" in message
