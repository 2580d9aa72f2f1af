"""The fused (compiled) and eager masked-moments kernels against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from telemetry import accumulate


def numpy_moments(x: torch.Tensor, mask: torch.Tensor) -> list[float]:
    values = x.to(torch.float64).numpy()[mask.numpy()]
    return [values.sum(), values.min(), -values.max()]


CASES = [
    (torch.float32, [1.5, -2.0, 3.25, 8.0, -9.0], [True, True, False, True, False]),
    (torch.float16, [0.5, 1.0, -0.25, 2.0], [True, True, True, True]),
    (torch.bfloat16, [4.0, -8.0, 2.0], [False, True, True]),
    (torch.float64, [-math.inf, 2.0, math.inf, 1.0], [True, True, False, True]),
    (torch.float32, [float("nan"), 1.0, 2.0], [False, True, True]),  # NaN on padding only
]


@pytest.fixture(scope="module")
def compiled_kernels():
    import os

    previous = os.environ.get("RLTEL_COMPILE")
    os.environ["RLTEL_COMPILE"] = "auto"
    try:
        for dtype in {case[0] for case in CASES}:
            accumulate.moments_fn(torch.zeros(4, dtype=dtype))
        assert accumulate.wait_for_kernels(timeout_s=300)
        yield {dtype: accumulate.moments_fn(torch.zeros(4, dtype=dtype)) for dtype, *_ in CASES}
    finally:
        os.environ["RLTEL_COMPILE"] = previous or "0"


@pytest.mark.parametrize(("dtype", "values", "mask"), CASES)
def test_eager_and_fused_kernels_match_numpy(compiled_kernels, dtype, values, mask):
    x = torch.tensor(values, dtype=dtype)
    m = torch.tensor(mask)
    expected = numpy_moments(x, m)
    for kernel in (accumulate._moments_eager, compiled_kernels[dtype]):
        got = kernel(x, m).tolist()
        assert got == pytest.approx(expected, rel=1e-12, nan_ok=True), kernel


def test_fused_kernel_is_really_compiled_and_shape_generic(compiled_kernels):
    import torch._dynamo

    kernel = compiled_kernels[torch.float32]
    assert kernel is not accumulate._moments_eager
    before = dict(torch._dynamo.utils.counters["stats"])
    rng = np.random.default_rng(0)
    for n in (1000, 4096 * 16, 12345):
        x = torch.from_numpy(rng.normal(size=n).astype(np.float32))
        m = torch.from_numpy(rng.random(n) < 0.7)
        assert kernel(x, m).tolist() == pytest.approx(numpy_moments(x, m), rel=1e-12)
    after = dict(torch._dynamo.utils.counters["stats"])
    assert after.get("unique_graphs", 0) == before.get("unique_graphs", 0)  # no recompile


def test_nan_on_a_valid_element_propagates(compiled_kernels):
    x = torch.tensor([1.0, float("nan"), 3.0])
    m = torch.ones(3, dtype=torch.bool)
    for kernel in (accumulate._moments_eager, compiled_kernels[torch.float32]):
        assert all(math.isnan(v) for v in kernel(x, m).tolist())


def test_bucket_counts_include_nan_in_last_bucket():
    x = torch.tensor([0.5, float("nan"), 2.0, -1.0])
    m = torch.tensor([True, True, True, False])
    counts = accumulate.bucket_counts(x, m, torch.tensor([0.0, 1.0], dtype=torch.float64))
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
