"""Compact state: a window's per-device stat bank, scalar states, bucket counts."""

from __future__ import annotations

import math

import pytest
import torch

from telemetry.model.errors import InvalidValueError
from telemetry.model.snapshot import StatReduce
from telemetry.record import accumulate, kernels


def test_bank_rows_accumulate_and_take_resets_only_the_taken_keys():
    bank = accumulate.Window().bank(torch.device("cpu"))
    mask = torch.tensor([True, False, True])
    masks = kernels.MaskBits(mask, torch.tensor(2.0, dtype=torch.float64))
    bank.fold(("a", "b"), masks, [torch.tensor([1.0, 9.0, 3.0]), torch.tensor([-1.0, 9.0, 0.5])])
    bank.fold(("b",), masks, [torch.tensor([4.0, 9.0, 2.0])])
    taken = bank.take(["b"], reset=True)
    assert taken["b"].tolist() == [5.5, 4.0, -1.0, -4.0]
    states = bank.take(["a", "b"], reset=False)
    assert states["a"].tolist() == [4.0, 2.0, 1.0, -3.0]
    assert states["b"].tolist() == [0.0, 0.0, math.inf, math.inf]  # reset by the first take


def test_bucket_counts_include_nan_in_last_bucket():
    x = torch.tensor([0.5, float("nan"), 2.0, -1.0])
    m = torch.tensor([True, True, True, False])
    counts = accumulate.bucket_counts(x, m, (0.0, 1.0))
    assert counts.tolist() == [0.0, 1.0, 2.0]


def test_scalar_state_host_and_device_parts_combine():
    state = accumulate.Window().scalar("x")
    state.add(2.0)
    state.add(-1.0)
    state.add_tensor(torch.tensor(5.0))
    assert state.state().tolist() == [6.0, 3.0, -1.0, -5.0]
    nan_state = accumulate.Window().scalar("x")
    nan_state.add(float("nan"))
    nan_state.add(1.0)
    assert all(math.isnan(v) for v in (nan_state.state()[[0, 2, 3]]).tolist())


def test_bucket_counts_are_upper_inclusive_and_match_a_reference():
    bounds = (-1.0, 0.0, 2.5)
    x = torch.tensor([-1.0, -1.0000001, 0.0, 1e-9, 2.5, 2.6, math.inf, -math.inf, float("nan")])
    m = torch.ones(x.numel(), dtype=torch.bool)
    m[1] = False
    counts = accumulate.bucket_counts(x, m, bounds)
    assert counts.tolist() == [2.0, 1.0, 2.0, 3.0]  # -inf,-1 | 0 | 1e-9,2.5 | 2.6,inf,nan
    rng = torch.Generator().manual_seed(0)
    y = torch.randn(1000, generator=rng, dtype=torch.float64)
    valid = torch.rand(1000, generator=rng) < 0.6
    got = accumulate.bucket_counts(y, valid, bounds).tolist()
    want = [0.0] * 4
    for value in y[valid].tolist():
        want[sum(value > b for b in bounds)] += 1
    assert got == want


def test_keys_new_to_a_bank_in_one_call_each_get_a_row_of_their_own():
    bank = accumulate.Window().bank(torch.device("cpu"))
    mask = torch.tensor([True, True])
    masks = kernels.MaskBits(mask, torch.tensor(2.0, dtype=torch.float64))
    bank.fold(("a",), masks, [torch.tensor([1.0, 2.0])])
    bank.fold(("b", "c", "d"), masks, [torch.tensor([v, v + 1.0]) for v in (10.0, 20.0, 30.0)])
    states = bank.take(["a", "b", "c", "d"], reset=False)
    assert {k: v.tolist() for k, v in states.items()} == {
        "a": [3.0, 2.0, 1.0, -2.0],
        "b": [21.0, 2.0, 10.0, -11.0],
        "c": [41.0, 2.0, 20.0, -21.0],
        "d": [61.0, 2.0, 30.0, -31.0],
    }


def test_bank_merge_adds_sums_and_counts_and_keeps_the_extremes():
    bank = accumulate.Window().bank(torch.device("cpu"))
    first = torch.tensor([[5.0, 2.0, 1.0, -4.0], [7.0, 1.0, 7.0, -7.0]], dtype=torch.float64)
    bank.merge(("a", "b"), first)
    bank.merge(("a",), torch.tensor([[1.0, 3.0, 0.5, -2.0]], dtype=torch.float64))
    states = bank.take(["a", "b"], reset=True)
    assert states["a"].tolist() == [6.0, 5.0, 0.5, -4.0]
    assert states["b"].tolist() == [7.0, 1.0, 7.0, -7.0]


def test_scalar_state_of_python_numbers_alone():
    state = accumulate.Window().scalar("x")
    for value in (2.0, -1.0, 0.5, 3.5, -0.5):
        state.add(value)
    assert state.state().tolist() == [4.5, 5.0, -1.0, -3.5]  # [sum, count, min, -max]
    falling = accumulate.Window().scalar("x")  # a smaller value after the maximum
    falling.add(3.0)
    falling.add(1.0)
    assert falling.state().tolist() == [4.0, 2.0, 1.0, -3.0]


def test_to_device_puts_the_tensor_on_the_device_asked_for():
    host = torch.arange(3, dtype=torch.int64)
    assert accumulate.to_device(host, torch.device("cpu")) is host  # nothing to copy
    moved = accumulate.to_device(host, torch.device("meta"))  # neither CPU nor CUDA
    assert moved.device.type == "meta" and moved.shape == host.shape


def _window_with_stats(*keys: str) -> accumulate.Window:
    """A window holding a masked stat per key (values 1 and 3 over a two-of-three mask)."""
    window = accumulate.Window()
    for key in keys:  # equal devices, never the same object, as tensors' devices are
        window.add_stat(key, StatReduce.AVG_MIN_MAX, torch.device("cpu"), ())
    masks = kernels.MaskBits(
        torch.tensor([True, False, True]), torch.tensor(2.0, dtype=torch.float64)
    )
    window.bank(torch.device("cpu")).fold(keys, masks, [torch.tensor([1.0, 9.0, 3.0])] * len(keys))
    return window


def test_drop_forgets_the_keys_of_every_kind_and_empties_their_stat_rows():
    window = _window_with_stats("a", "b")
    window.scalar("s").add(1.0)
    window.scalar("c").add(1.0)
    window.denominators["d"] = torch.tensor([2.0], dtype=torch.float64)
    window.masks["d"] = kernels.MaskBits(torch.ones(2, dtype=torch.bool), torch.tensor(2.0))
    window.groups["a"] = window.owners["a"] = "owner"
    window.drop(["a", "s", "d"])
    assert set(window.stats) == {"b"} and set(window.scalars) == {"c"}
    assert not window.denominators and not window.masks
    assert not window.groups and not window.owners
    empty = [0.0, 0.0, math.inf, math.inf]
    assert window.bank(torch.device("cpu")).take(["a"], reset=False)["a"].tolist() == empty
    assert window.take(None, reset=False).states()["b"][1].tolist() == [4.0, 2.0, 1.0, -3.0]


def test_a_key_keeps_the_last_reduce_group_given_and_a_call_without_one_keeps_it():
    window = accumulate.Window()
    window.set_group("a", None)
    assert "a" not in window.groups  # no group given: the key has none
    first, second = object(), object()
    window.set_group("a", first)
    window.set_group("a", None)
    assert window.groups["a"] is first  # a later call without a group keeps the last one
    window.set_group("a", second)
    assert window.groups == {"a": second}  # AReaL keeps the last group given


# The meta device is a second device on any machine: a window's checks and banks tell
# devices apart by equality, never by identity (a tensor's ``device`` is a new object).
META = torch.device("meta")


def test_a_stat_recorded_on_one_device_is_refused_on_another_by_name():
    window = _window_with_stats("a")
    window.check_stat("a", StatReduce.AVG_MIN_MAX, torch.device("cpu"))  # equal, other object
    with pytest.raises(InvalidValueError, match="'a': recorded on cpu, now on meta"):
        window.check_stat("a", StatReduce.AVG_MIN_MAX, META)


def test_drop_empties_each_key_in_its_own_devices_bank_only():
    window = _window_with_stats("a")
    window.add_stat("m", StatReduce.AVG_MIN_MAX, META, ())
    window.bank(META).take(["m"], reset=False)  # a row for "m" in the meta bank
    window.drop(["a", "m"])
    assert set(window.bank(torch.device("cpu")).rows) == {"a"}  # no row made for "m"
    assert set(window.bank(META).rows) == {"m"}  # nor for "a"


def test_take_under_a_prefix_takes_the_key_and_its_subkeys_only():
    prefix = "".join(["b", "b"])  # made at run time: equal to the key "bb", not the same object
    window = _window_with_stats("a", "bb", "bb/x", "bba", "c")
    taken = window.take(prefix, reset=True)
    assert set(taken.stats) == {"bb", "bb/x"}
    assert set(window.stats) == {"a", "bba", "c"}


def test_a_stat_without_buckets_has_a_layout_without_buckets():
    (layout, state) = _window_with_stats("a").take(None, reset=False).states()["a"]
    assert layout.n_buckets == 0 and layout.reduce is StatReduce.AVG_MIN_MAX
    assert state.tolist() == [4.0, 2.0, 1.0, -3.0]


def test_a_stat_recorded_with_another_reduce_type_is_refused_naming_both():
    window = _window_with_stats("a")
    window.check_stat("a", StatReduce.AVG_MIN_MAX, torch.device("cpu"))  # the same: no error
    with pytest.raises(
        InvalidValueError, match="'a': recorded with reduce type avg_min_max, now sum"
    ):
        window.check_stat("a", StatReduce.SUM, torch.device("cpu"))
