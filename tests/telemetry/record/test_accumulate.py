"""Compact state: the per-device stat bank, scalar states, bucket counts."""

from __future__ import annotations

import math

import torch

from telemetry.record import accumulate, kernels


def test_bank_rows_accumulate_and_take_resets_only_the_taken_keys():
    bank = accumulate.StatBank(torch.device("cpu"))
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
    state = accumulate.ScalarState()
    state.add(2.0)
    state.add(-1.0)
    state.add_tensor(torch.tensor(5.0))
    assert state.state().tolist() == [6.0, 3.0, -1.0, -5.0]
    nan_state = accumulate.ScalarState()
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
