"""The masked-moment kernel against numpy, and a guard that rltel never compiles."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from telemetry.record import kernels
from telemetry.record.scratch import Scratch

NAN, INF = math.nan, math.inf
CASES = {
    "float32": (
        torch.float32,
        [[1.5, -2.0, 3.25, 8.0, -9.0], [0.5, 7.0, -1.0, 2.0, 2.5]],
        [True, True, False, True, False],
    ),
    "float16": (torch.float16, [[0.5, 1.0, -0.25, 2.0]], [True, True, True, True]),
    "bfloat16": (
        torch.bfloat16,
        [[4.0, -8.0, 2.0], [1.0, 1.0, -3.0], [0.0, 5.0, 6.0]],
        [False, True, True],
    ),
    "float64 with infs": (torch.float64, [[-INF, 2.0, INF, 1.0]], [True, True, False, True]),
    "both infs valid": (torch.float32, [[-INF, 2.0, INF]], [True, True, True]),
    "nan and inf on padding only": (
        torch.float32,
        [[NAN, 1.0, 2.0, -INF], [INF, -3.0, 0.5, NAN]],
        [False, True, True, False],
    ),
    "only the first element valid": (torch.float32, [[5.0, NAN, INF]], [True, False, False]),
    "only the last element valid": (torch.bfloat16, [[NAN, -INF, -7.0]], [False, False, True]),
    "negative zero and subnormal": (
        torch.float32,
        [[-0.0, 1e-40, -1e-40, 3.0]],
        [True, True, True, False],
    ),
}


def numpy_fold(states: np.ndarray, xs: list[torch.Tensor], mask: torch.Tensor) -> np.ndarray:
    """The reference: sum, count, min and -max of each tensor's valid values in float64."""
    out = states.copy()
    m = mask.reshape(-1).numpy()
    for i, x in enumerate(xs):
        values = x.to(torch.float64).numpy()[m]
        out[i, 1] += values.size
        if values.size == 0:
            continue
        with np.errstate(invalid="ignore"):  # -inf + inf is NaN, as in torch
            out[i, 0] += values.sum()
        out[i, 2] = min(out[i, 2], values.min())
        out[i, 3] = min(out[i, 3], -values.max())
    return out


def kernel_fold(states: np.ndarray, xs: list[torch.Tensor], mask: torch.Tensor) -> np.ndarray:
    masks = kernels.MaskBits(mask, mask.sum(dtype=torch.float64))
    return kernels.fold(torch.from_numpy(states), masks, xs, Scratch(torch.device("cpu"))).numpy()


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_matches_numpy(case):
    dtype, rows, mask = CASES[case]
    xs = [torch.tensor(row, dtype=dtype) for row in rows]
    m = torch.tensor(mask)
    states = np.array([[1.0, 2.0, -0.5, -0.5]] * len(xs))  # a window already holding data
    assert_same(kernel_fold(states, xs, m), numpy_fold(states, xs, m))


def test_both_infinities_on_valid_elements_give_nan_sum_and_true_extremes():
    got = kernel_fold(
        np.array([[0.0, 0.0, INF, INF]]),
        [torch.tensor([-INF, 2.0, INF])],
        torch.tensor([True, True, True]),
    )
    assert math.isnan(got[0, 0]) and got[0, 1] == 3.0
    assert got[0, 2] == -INF and got[0, 3] == -INF  # min -inf, max +inf (stored negated)


def test_nan_on_a_valid_element_propagates():
    x = torch.tensor([1.0, NAN, 3.0, 4.0])
    m = torch.tensor([True, True, True, False])
    got = kernel_fold(np.array([[0.0, 0.0, INF, INF]]), [x], m)
    assert math.isnan(got[0, 0]) and math.isnan(got[0, 2]) and math.isnan(got[0, 3])
    assert got[0, 1] == 3.0


def test_no_valid_element_leaves_the_extremes_and_sum_alone():
    states = np.array([[2.0, 1.0, 2.0, -2.0], [0.0, 0.0, INF, INF]])
    xs = [torch.tensor([NAN, -INF, 9.0]), torch.tensor([1.0, 2.0, 3.0])]
    got = kernel_fold(states, xs, torch.zeros(3, dtype=torch.bool))
    np.testing.assert_array_equal(got, states)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize(("k", "n"), [(1, 1), (1, 1000), (4, 4096 * 16), (7, 12345)])
def test_random_blocks_of_every_dtype_and_shape(dtype, k, n):
    rng = np.random.default_rng(k * n)
    xs = [torch.from_numpy(rng.normal(size=n)).to(dtype) for _ in range(k)]
    m = torch.from_numpy(rng.random(n) < 0.7)
    states = np.tile([0.0, 0.0, INF, INF], (k, 1))
    assert_same(kernel_fold(states, xs, m), numpy_fold(states, xs, m))


def test_two_dimensional_mask_is_read_flattened():
    m = torch.tensor([[True, False], [False, True]])
    xs = [torch.tensor([1.0, NAN, INF, 4.0])]
    got = kernel_fold(np.array([[0.0, 0.0, INF, INF]]), xs, m)
    assert got.tolist() == [[5.0, 2.0, 1.0, -4.0]]


def test_rows_view_reads_rows_of_one_buffer_in_place():
    buffer = torch.arange(20.0).reshape(4, 5)
    rows = [row.detach().reshape(-1) for row in buffer[1:4].unbind(0)]
    view = kernels.rows_view(rows)
    assert view.data_ptr() == buffer[1].data_ptr() and torch.equal(view, buffer[1:4])
    for xs in (
        [buffer[2], buffer[1]],  # out of order
        [buffer[0], buffer[2]],  # not consecutive
        [buffer[0], torch.arange(5.0, 10.0)],  # another buffer
        [buffer[:, 0], buffer[:, 1]],  # strided
    ):
        assert kernels.rows_view(xs) is None
        states = torch.tensor([[0.0, 0.0, INF, INF]] * 2, dtype=torch.float64)
        mask = torch.tensor([True, False, True, True, False])[: xs[0].numel()]
        masks = kernels.MaskBits(mask, mask.sum().double())
        got = kernels.fold(states, masks, xs, Scratch(torch.device("cpu")))
        assert_same(got.numpy(), numpy_fold(states.numpy(), xs, mask))


def test_kernel_does_not_modify_its_inputs():
    x = torch.tensor([NAN, 1.0, 2.0])
    m = torch.tensor([False, True, True])
    before = x.clone()
    kernel_fold(np.array([[0.0, 0.0, INF, INF]]), [x], m)
    assert torch.equal(x.isnan(), before.isnan()) and x[1:].tolist() == before[1:].tolist()


_NO_COMPILER = """
import sys, threading, torch
from telemetry import stats_tracker as st
from telemetry.metrics.train_infer import record_train_infer
m = torch.rand(4, 64) < 0.5
st.denominator(mask=m)
st.stat(loss=torch.randn(4, 64), denominator="mask")
record_train_infer(torch.randn(4, 64), torch.randn(4, 64), m)
out = st.export_all()
loaded = sorted(n for n in sys.modules if n.startswith(("torch._dynamo", "torch._inductor")))
print(len(out) > 0, threading.active_count(), loaded)
"""


def test_recording_and_export_never_load_the_compiler_or_start_a_thread():
    done = subprocess.run(
        [sys.executable, "-c", _NO_COMPILER], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(None, 2) == ["True", "1", "[]\n"], done.stdout


def test_fold_block_overwriting_keeps_valid_values_and_gives_the_same_states():
    rng = np.random.default_rng(5)
    block = torch.from_numpy(rng.normal(size=(3, 50)))
    block[0, 3], block[1, 7] = NAN, INF
    m = torch.from_numpy(rng.random(50) < 0.6)
    m[3], m[7] = False, False
    masks = kernels.MaskBits(m, m.sum(dtype=torch.float64))
    states = torch.tensor([[0.0, 0.0, INF, INF]] * 3, dtype=torch.float64)
    memory = Scratch(torch.device("cpu"))
    want = kernels.fold_block(states, masks, block, memory, overwrite=False)
    overwritten = block.clone()
    got = kernels.fold_block(states, masks, overwritten, memory, overwrite=True)
    assert torch.equal(got, want)
    assert torch.equal(overwritten[:, m], block[:, m])
    assert bool((overwritten[:, ~m] == -INF).all())  # padding ends at -inf


def _rows_that_only_look_consecutive() -> list[list[torch.Tensor]]:
    """Second rows whose storage offset is where a consecutive row would start, but that
    are not that row: a repeated element, a strided slice, the same offset in another
    buffer (both ways round, so that its address is above and below the first's)."""
    buf = torch.arange(20.0)
    a, b = torch.arange(10.0), torch.arange(100.0, 110.0)
    return [
        [buf[0:5], buf[5:6].expand(5)],  # stride 0
        [buf[0:5], buf[5:15:2]],  # stride 2
        [a[0:5], b[5:10]],
        [b[0:5], a[5:10]],
    ]


@pytest.mark.parametrize("xs", _rows_that_only_look_consecutive())
def test_rows_at_the_next_offset_that_are_not_the_next_row_are_not_viewed(xs):
    assert all(x.storage_offset() == 5 * i for i, x in enumerate(xs))
    assert kernels.rows_view(xs) is None
    states = torch.tensor([[0.0, 0.0, INF, INF]] * 2, dtype=torch.float64)
    mask = torch.tensor([True, True, False, True, True])
    masks = kernels.MaskBits(mask, mask.sum().double())
    got = kernels.fold(states, masks, xs, Scratch(torch.device("cpu")))
    assert_same(got.numpy(), numpy_fold(states.numpy(), xs, mask))
