"""The eager and fused (compiled) masked-moment kernels against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from telemetry import kernels

CASES = [
    (
        torch.float32,
        [[1.5, -2.0, 3.25, 8.0, -9.0], [0.5, 7.0, -1.0, 2.0, 2.5]],
        [True, True, False, True, False],
    ),
    (torch.float16, [[0.5, 1.0, -0.25, 2.0]], [True, True, True, True]),
    (torch.bfloat16, [[4.0, -8.0, 2.0], [1.0, 1.0, -3.0], [0.0, 5.0, 6.0]], [False, True, True]),
    (torch.float64, [[-math.inf, 2.0, math.inf, 1.0]], [True, True, False, True]),
    (torch.float32, [[float("nan"), 1.0, 2.0]], [False, True, True]),  # NaN on padding only
]


def numpy_fold(states: np.ndarray, xs: list[torch.Tensor], mask: torch.Tensor) -> np.ndarray:
    out = states.copy()
    m = mask.numpy()
    for i, x in enumerate(xs):
        values = x.to(torch.float64).numpy()[m]
        out[i, 0] += values.sum()
        out[i, 1] += values.size
        out[i, 2] = min(out[i, 2], values.min())
        out[i, 3] = min(out[i, 3], -values.max())
    return out


@pytest.fixture(scope="module")
def fused():
    import os

    previous = os.environ.get("RLTEL_COMPILE")
    os.environ["RLTEL_COMPILE"] = "auto"
    try:
        dtypes = {case[0] for case in CASES}
        for dtype in dtypes:
            kernels.fused_kernel(dtype, torch.device("cpu"))
        assert kernels.wait_for_kernels(timeout_s=600)
        yield {dtype: kernels.fused_kernel(dtype, torch.device("cpu")) for dtype in dtypes}
    finally:
        os.environ["RLTEL_COMPILE"] = previous or "0"


def _inputs(dtype, rows, mask):
    xs = [torch.tensor(row, dtype=dtype) for row in rows]
    m = torch.tensor(mask)
    states = np.array([[1.0, 2.0, -0.5, -0.5]] * len(xs))  # a window already holding data
    return xs, m, states


@pytest.mark.parametrize(("dtype", "rows", "mask"), CASES)
def test_eager_and_fused_kernels_match_numpy(fused, dtype, rows, mask):
    xs, m, states = _inputs(dtype, rows, mask)
    expected = numpy_fold(states, xs, m)
    count = torch.tensor(float(m.sum()), dtype=torch.float64)
    eager = kernels.fold_eager(torch.from_numpy(states), count, m, xs)
    assert fused[dtype] is not None
    compiled = fused[dtype](torch.from_numpy(states), count, m.to(torch.float32), torch.stack(xs))
    for got in (eager, compiled):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_fused_kernel_is_shape_generic(fused):
    import torch._dynamo

    kernel = fused[torch.float32]
    before = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)
    rng = np.random.default_rng(0)
    for k, n in ((1, 1000), (4, 4096 * 16), (7, 12345)):
        xs = [torch.from_numpy(rng.normal(size=n).astype(np.float32)) for _ in range(k)]
        m = torch.from_numpy(rng.random(n) < 0.7)
        states = np.tile([0.0, 0.0, math.inf, math.inf], (k, 1))
        count = torch.tensor(float(m.sum()), dtype=torch.float64)
        got = kernel(torch.from_numpy(states), count, m.to(torch.float32), torch.stack(xs))
        np.testing.assert_allclose(got.numpy(), numpy_fold(states, xs, m), rtol=1e-12)
    assert torch._dynamo.utils.counters["stats"].get("unique_graphs", 0) == before  # no recompile


def test_nan_on_a_valid_element_propagates(fused):
    x = torch.tensor([1.0, float("nan"), 3.0])
    m = torch.ones(3, dtype=torch.bool)
    states = torch.tensor([[0.0, 0.0, math.inf, math.inf]], dtype=torch.float64)
    count = torch.tensor(3.0, dtype=torch.float64)
    eager = kernels.fold_eager(states, count, m, [x])
    compiled = fused[torch.float32](states, count, m.float(), x.unsqueeze(0))
    for got in (eager, compiled):
        assert math.isnan(got[0, 0]) and math.isnan(got[0, 2]) and math.isnan(got[0, 3])
        assert got[0, 1] == 3.0


def test_fold_dispatches_to_eager_when_compilation_is_off(monkeypatch):
    monkeypatch.setenv("RLTEL_COMPILE", "0")
    assert kernels.fused_kernel(torch.float32, torch.device("cpu")) is None
    states = torch.tensor([[0.0, 0.0, math.inf, math.inf]], dtype=torch.float64)

    def no_float_mask():
        raise AssertionError("the eager kernel must not need the float mask")

    got = kernels.fold(
        states,
        torch.tensor(2.0, dtype=torch.float64),
        torch.tensor([True, True]),
        no_float_mask,
        [torch.tensor([1.0, 2.0])],
    )
    assert got.tolist() == [[3.0, 2.0, 1.0, -2.0]]


def test_stacked_view_reads_rows_of_one_buffer_in_place():
    buffer = torch.arange(20.0).reshape(4, 5)
    rows = [row.detach().reshape(-1) for row in buffer[1:4].unbind(0)]
    view = kernels.stacked_view(rows)
    assert view.data_ptr() == buffer[1].data_ptr() and torch.equal(view, buffer[1:4])
    for xs in (
        [buffer[2], buffer[1]],  # out of order
        [buffer[0], buffer[2]],  # not consecutive
        [buffer[0], torch.arange(5.0, 10.0)],  # another buffer
        [buffer[:, 0], buffer[:, 1]],  # strided
    ):
        copy = kernels.stacked_view(xs)
        assert torch.equal(copy, torch.stack(xs))
        assert copy.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr()
