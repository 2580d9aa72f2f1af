"""The recording API against an independent float64 numpy reference (single process)."""

from __future__ import annotations

import asyncio
import math
import threading

import numpy as np
import pytest
import torch

from telemetry import stats_tracker
from telemetry.model.errors import (
    InvalidValueError,
    MaskTypeError,
    ShapeMismatchError,
    UnknownDenominatorError,
)
from telemetry.model.snapshot import Histogram
from telemetry.record.stats import Stats
from telemetry.record.tracker import DistributedStatsTracker, ReduceType


@pytest.fixture
def tracker() -> DistributedStatsTracker:
    return DistributedStatsTracker()


def reference(values: list[np.ndarray], masks: list[np.ndarray]) -> dict[str, float]:
    """avg/min/max/sum/count pooled over every call, in float64."""
    picked = np.concatenate([v.astype(np.float64)[m] for v, m in zip(values, masks)])
    if picked.size == 0:
        return {"count": 0, "sum": 0.0}
    return {
        "count": picked.size,
        "sum": picked.sum(),
        "avg": picked.sum() / picked.size,
        "min": picked.min(),
        "max": picked.max(),
    }


def test_avg_min_max_pooled_over_calls_not_averaged(tracker):
    rng = np.random.default_rng(0)
    values, masks = [], []
    for n in (3, 50, 7):  # very unequal mask counts: an average of averages would differ
        x = rng.normal(size=(4, n)).astype(np.float32)
        m = rng.random((4, n)) < 0.6
        values.append(x)
        masks.append(m)
        with tracker.scope("ppo_actor"), tracker.scope("update"):
            tracker.denominator(n_valid_tokens=torch.from_numpy(m))
            tracker.stat(loss=torch.from_numpy(x), denominator="n_valid_tokens")
    out = tracker.export()
    ref = reference(values, masks)
    assert out["ppo_actor/update/loss/avg"] == pytest.approx(ref["avg"], rel=1e-12)
    assert out["ppo_actor/update/loss/min"] == pytest.approx(ref["min"], rel=1e-7)
    assert out["ppo_actor/update/loss/max"] == pytest.approx(ref["max"], rel=1e-7)
    assert out["ppo_actor/update/n_valid_tokens"] == ref["count"]
    assert set(out) == {
        "ppo_actor/update/loss/avg",
        "ppo_actor/update/loss/min",
        "ppo_actor/update/loss/max",
        "ppo_actor/update/n_valid_tokens",
    }


@pytest.mark.parametrize(
    ("reduce_type", "expected_key", "field"),
    [
        (ReduceType.AVG, "x", "avg"),
        (ReduceType.SUM, "x", "sum"),
        (ReduceType.MIN, "x", "min"),
        (ReduceType.MAX, "x", "max"),
    ],
)
def test_each_reduce_type(tracker, reduce_type, expected_key, field):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 16))
    m = rng.random((8, 16)) < 0.5
    tracker.denominator(valid=torch.from_numpy(m))
    tracker.stat(x=torch.from_numpy(x), denominator="valid", reduce_type=reduce_type)
    out = tracker.export()
    assert out[expected_key] == pytest.approx(reference([x], [m])[field], rel=1e-12)
    assert set(out) == {"x", "valid"}


def test_mixed_dtypes_accumulate_in_float64(tracker):
    rng = np.random.default_rng(2)
    values, masks = [], []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.from_numpy(rng.normal(size=(2, 32))).to(dtype)
        m = torch.from_numpy(rng.random((2, 32)) < 0.7)
        values.append(x.to(torch.float64).numpy())  # the value the tracker really saw
        masks.append(m.numpy())
        tracker.denominator(valid=m)
        tracker.stat(x=x, denominator="valid")
    out = tracker.export()
    ref = reference(values, masks)
    assert out["x/avg"] == pytest.approx(ref["avg"], rel=1e-12)
    assert out["x/min"] == ref["min"]
    assert out["x/max"] == ref["max"]


def test_empty_denominator_omits_key_but_sum_reports_zero(tracker):
    empty = torch.zeros(3, 5, dtype=torch.bool)
    tracker.denominator(valid=empty)
    tracker.stat(x=torch.randn(3, 5), denominator="valid")
    tracker.stat(total=torch.randn(3, 5), denominator="valid", reduce_type=ReduceType.SUM)
    tracker.stat(low=torch.randn(3, 5), denominator="valid", reduce_type=ReduceType.MIN)
    out = tracker.export()
    assert out == {"valid": 0.0, "total": 0.0}
    histogram = {p.key: p for p in out.points}["x"]
    assert isinstance(histogram, Histogram)
    assert histogram.count == 0 and histogram.min is None and histogram.max is None


def test_nan_on_valid_token_propagates_and_padding_is_ignored(tracker):
    x = torch.tensor([[1.0, float("nan"), 3.0], [float("nan"), 5.0, 6.0]])
    mask = torch.tensor([[True, False, True], [False, True, True]])
    tracker.denominator(valid=mask)
    tracker.stat(clean=x, denominator="valid")  # NaNs only on padding
    tracker.denominator(all_=torch.ones(2, 3, dtype=torch.bool))
    tracker.stat(dirty=x, denominator="all_")
    out = tracker.export()
    assert out["clean/avg"] == pytest.approx(15.0 / 4)
    assert (out["clean/min"], out["clean/max"]) == (1.0, 6.0)
    assert all(math.isnan(out[f"dirty/{f}"]) for f in ("avg", "min", "max"))


def test_genuine_infinities_are_reported(tracker):
    x = torch.tensor([-math.inf, 0.0, 2.0, math.inf])
    mask = torch.tensor([True, True, True, False])
    tracker.denominator(valid=mask)
    tracker.stat(x=x, denominator="valid")
    out = tracker.export()
    assert out["x/min"] == -math.inf
    assert out["x/max"] == 2.0
    assert out["x/avg"] == -math.inf


def test_counts_exact_past_2_pow_24(tracker):
    n = 2**24 + 3
    mask = torch.ones(n, dtype=torch.bool)
    tracker.denominator(valid=mask)
    tracker.denominator(valid=mask[:5])
    tracker.stat(ones=torch.ones(5), denominator="valid")
    out = tracker.export()
    assert out["valid"] == n + 5
    assert int(out["valid"]) == 16777224


def test_scalar_count_weighted_mean_and_companion_count(tracker):
    for value in (1.0, 2.0, 6.0):
        tracker.scalar(reward=value)
    tracker.scalar(reward=torch.tensor(3.0))
    out = tracker.export()
    assert out["reward"] == pytest.approx(3.0)
    assert out["reward__count"] == 4


def test_named_trackers_and_timing_keys():
    stats_tracker.export_all()  # start from a clean window
    stats_tracker.get("rollout").scalar(reward=1)
    stats_tracker.get("eval-rollout").scalar(reward=0.5)
    with stats_tracker.record_timing("rollout"):
        pass
    with stats_tracker.scope("ppo_actor"), stats_tracker.record_timing("update"):
        pass
    out = stats_tracker.export_all()
    assert out["rollout/reward"] == 1.0 and out["rollout/reward__count"] == 1
    assert out["eval-rollout/reward"] == 0.5
    assert out["timeperf/rollout"] >= 0.0
    assert "timeperf/update" in out  # AReaL: timing keys ignore the scope
    assert stats_tracker.export_all() == {}  # reset by the export


def test_export_is_typed_and_reset(tracker):
    tracker.denominator(valid=torch.ones(4, dtype=torch.bool))
    tracker.stat(x=torch.arange(4.0), denominator="valid")
    out = tracker.export()
    assert isinstance(out, Stats)
    assert {type(p).__name__ for p in out.points} == {"Histogram", "Gauge"}
    assert tracker.export() == {}


def test_export_without_reset_keeps_accumulating(tracker):
    tracker.scalar(a=1.0)
    assert tracker.export(reset=False)["a__count"] == 1
    tracker.scalar(a=3.0)
    assert tracker.export()["a"] == 2.0


def test_export_key_prefix(tracker):
    with tracker.scope("a"):
        tracker.scalar(x=1)
    with tracker.scope("b"):
        tracker.scalar(y=2)
    assert set(tracker.export(key="a")) == {"a/x", "a/x__count"}
    assert set(tracker.export()) == {"b/y", "b/y__count"}


def test_bucket_counts_follow_otel_upper_inclusive_bounds(tracker):
    x = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 7.0, float("nan")])
    mask = torch.tensor([True, True, True, True, True, True, True, False])
    tracker.set_bucket_bounds("x", [-1.0, 0.0, 1.0])
    tracker.denominator(valid=mask)
    tracker.stat(x=x, denominator="valid")
    point = next(p for p in tracker.export().points if p.key == "x")
    assert point.bounds == (-1.0, 0.0, 1.0)
    values = x.numpy()[mask.numpy()]
    expected = np.histogram(values, bins=[-np.inf, -1.0, 0.0, 1.0, np.inf])[0]
    # numpy bins are lower-inclusive; OTel's are upper-inclusive: compute that directly.
    expected = [
        int(((values > lo) & (values <= hi)).sum())
        for lo, hi in zip([-np.inf, -1.0, 0.0, 1.0], [-1.0, 0.0, 1.0, np.inf])
    ]
    assert list(point.bucket_counts) == expected
    assert sum(point.bucket_counts) == point.count


def test_scope_stack_is_exception_safe_and_per_thread(tracker):
    with pytest.raises(RuntimeError), tracker.scope("outer"):
        raise RuntimeError("boom")
    assert tracker.full_key("k") == "k"

    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        with tracker.scope(name):
            barrier.wait()
            seen[name] = tracker.full_key("k")

    threads = [threading.Thread(target=work, args=(n,)) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"t1": "t1/k", "t2": "t2/k"}


def test_scope_stack_is_per_asyncio_task(tracker):
    async def work(name: str) -> str:
        with tracker.scope(name):
            await asyncio.sleep(0.01)
            return tracker.full_key("k")

    async def main() -> list[str]:
        return await asyncio.gather(work("a"), work("b"))

    assert asyncio.run(main()) == ["a/k", "b/k"]


def test_bad_input_errors_name_the_scoped_key(tracker):
    mask = torch.ones(2, 3, dtype=torch.bool)
    with tracker.scope("ppo_actor"):
        tracker.denominator(valid=mask)
        with pytest.raises(ShapeMismatchError, match=r"'ppo_actor/loss'.*\(2, 4\).*\(2, 3\)"):
            tracker.stat(loss=torch.zeros(2, 4), denominator="valid")
        with pytest.raises(UnknownDenominatorError, match="'ppo_actor/loss'.*ppo_actor/nope"):
            tracker.stat(loss=torch.zeros(2, 3), denominator="nope")
        with pytest.raises(MaskTypeError, match="'ppo_actor/bad'.*float"):
            tracker.denominator(bad=torch.ones(2, 3))
        with pytest.raises(InvalidValueError, match="'ppo_actor/empty'"):
            tracker.denominator(empty=torch.ones(0, dtype=torch.bool))
        with pytest.raises(InvalidValueError, match="'ppo_actor/loss'.*list"):
            tracker.stat(loss=[1.0, 2.0], denominator="valid")
        with pytest.raises(InvalidValueError, match="'ppo_actor/lr'.*str"):
            tracker.scalar(lr="0.1")
        with pytest.raises(InvalidValueError, match="'ppo_actor/lr'.*shape"):
            tracker.scalar(lr=torch.ones(3))
        with pytest.raises(InvalidValueError, match="'ppo_actor/flag'.*bool"):
            tracker.stat(flag=mask, denominator="valid")
    # nothing half-recorded
    assert tracker.export() == {"ppo_actor/valid": 6.0}


def test_scalar_or_a_string_is_no_reduce_type_for_stat(tracker):
    tracker.denominator(valid=torch.ones(3, dtype=torch.bool))
    with pytest.raises(InvalidValueError, match="'x'.*reduce type SCALAR is not valid"):
        tracker.stat(x=torch.ones(3), denominator="valid", reduce_type=ReduceType.SCALAR)
    with pytest.raises(InvalidValueError, match="'x'.*reduce type 'avg' is not valid"):
        tracker.stat(x=torch.ones(3), denominator="valid", reduce_type="avg")
    assert tracker.export() == {"valid": 3.0}  # nothing recorded


def test_reduce_type_change_for_a_key_raises(tracker):
    tracker.denominator(valid=torch.ones(3, dtype=torch.bool))
    tracker.stat(x=torch.ones(3), denominator="valid")
    with pytest.raises(InvalidValueError, match="'x'.*avg_min_max.*sum"):
        tracker.stat(x=torch.ones(3), denominator="valid", reduce_type=ReduceType.SUM)
    with pytest.raises(InvalidValueError, match="'x'.*scalar"):
        tracker.scalar(x=1.0)


def test_state_is_constant_size_and_not_a_clone(tracker):
    mask = torch.ones(64, 1024, dtype=torch.bool)
    for _ in range(5):
        tracker.denominator(valid=mask)
        tracker.stat(a=torch.randn(64, 1024), b=torch.randn(64, 1024), denominator="valid")
    states = tracker.collect(reset=False).states
    assert {k: v[1].numel() for k, v in states.items()} == {"a": 4, "b": 4, "valid": 1}


def test_recorded_tensors_are_not_kept(tracker):
    import gc
    import weakref

    mask = torch.ones(64, 1024, dtype=torch.bool)
    tracker.denominator(valid=mask)
    x = torch.randn(64, 1024)
    ref = weakref.ref(x)
    tracker.stat(x=x, denominator="valid")
    del x
    gc.collect()
    assert ref() is None  # neither the tensor nor a view of it is held
    assert tracker.export()["x/avg"] != 0.0


def test_record_timing_reports_seconds():
    import time

    tracker = DistributedStatsTracker()
    with tracker.record_timing("sleep"):
        time.sleep(0.2)
    got = tracker.export()["timeperf/sleep"]
    assert 0.2 <= got < 0.6  # seconds, not milliseconds


def test_a_rejected_call_records_none_of_its_keys(tracker):
    tracker.denominator(valid=torch.ones(3, dtype=torch.bool))
    tracker.stat(b=torch.ones(3), denominator="valid", reduce_type=ReduceType.SUM)
    with pytest.raises(InvalidValueError, match="'b'"):
        tracker.stat(a=torch.ones(3), b=torch.ones(3), denominator="valid")
    assert {point.key for point in tracker.export().points} == {"valid", "b"}  # no empty 'a'


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_recording_a_step_never_synchronises():
    device = torch.device("cuda")
    cuda_tracker = DistributedStatsTracker()
    cuda_tracker.set_bucket_bounds("ppo_actor/logp", [-2.0, -1.0, 0.0])
    mask = torch.rand(16, 4096, device=device) < 0.7
    x = torch.randn(16, 4096, device=device)
    cuda_tracker.denominator(n_valid=mask)  # first window: warm the bank and its indices
    cuda_tracker.stat(loss=x, denominator="n_valid")
    cuda_tracker.export()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            with cuda_tracker.scope("ppo_actor"):
                cuda_tracker.denominator(n_valid=mask)
                cuda_tracker.stat(loss=x.to(dtype), logp=-x.abs().to(dtype), denominator="n_valid")
                cuda_tracker.scalar(grad_norm=x[0, 0])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    out = cuda_tracker.export()
    valid = x[mask].double().cpu().numpy()
    assert out["ppo_actor/n_valid"] == 3 * valid.size
    assert out["ppo_actor/loss/max"] == pytest.approx(valid.max(), rel=1e-2)


def test_plain_stats_export_without_bucket_warnings(tracker, caplog):
    tracker.denominator(valid=torch.ones(3, dtype=torch.bool))
    tracker.stat(x=torch.ones(3), denominator="valid")
    with caplog.at_level("WARNING"):
        point = next(p for p in tracker.export().points if p.key == "x")
    assert point.bounds == () and point.bucket_counts == ()
    assert not caplog.records


def test_fold_moment_rows_pools_with_stat_and_names_a_bad_state():
    tracker = DistributedStatsTracker()
    mask = torch.tensor([True, True, False])
    tracker.denominator(mask=mask)
    tracker.stat(x=torch.tensor([1.0, 4.0, 100.0]), denominator="mask")
    tracker.fold_moment_rows(["x"], torch.tensor([[2.0, 2.0, -3.0, -5.0]], dtype=torch.float64))
    out = tracker.export()
    assert out["x/avg"] == 7.0 / 4 and out["x/min"] == -3.0 and out["x/max"] == 5.0
    with pytest.raises(InvalidValueError, match=r"'y': expected float64 states of shape \(1, 4\)"):
        tracker.fold_moment_rows(["y"], torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64))
    with pytest.raises(InvalidValueError, match="'x': recorded with reduce type avg_min_max"):
        tracker.denominator(mask=mask)
        tracker.stat(x=torch.tensor([1.0, 4.0, 100.0]), denominator="mask")
        empty = torch.tensor([[0.0, 0.0, math.inf, math.inf]], dtype=torch.float64)
        tracker.fold_moment_rows(["x"], empty, ReduceType.AVG)


def test_fold_moment_rows_folds_bucket_counts_and_names_bad_ones():
    rows = torch.tensor([[2.0, 2.0, -3.0, -5.0], [1.0, 4.0, 0.0, -1.0]], dtype=torch.float64)
    buckets = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    tracker = DistributedStatsTracker()
    with tracker.scope("s"):
        tracker.set_bucket_bounds("x", (0.0, 1.0))
        tracker.fold_moment_rows(["x", "y"], rows, ReduceType.AVG, {"x": buckets})
    x, y = sorted(tracker.export().points, key=lambda point: point.key)
    avg = ReduceType.AVG
    assert x == Histogram("s/x", 2, 2.0, -3.0, 5.0, (0.0, 1.0), (1, 0, 1), reduce=avg)
    assert y == Histogram("s/y", 4, 1.0, 0.0, 1.0, reduce=avg)
    tracker = DistributedStatsTracker()
    tracker.set_bucket_bounds("x", (0.0, 1.0))
    with pytest.raises(InvalidValueError, match=r"'x': expected float64 states of shape \(2, 4\)"):
        tracker.fold_moment_rows(["x", "y"], rows[:1], ReduceType.AVG, {"x": buckets})
    with pytest.raises(InvalidValueError, match="'x': expected a float64 bucket-count vector of 3"):
        tracker.fold_moment_rows(["x", "y"], rows, ReduceType.AVG)
    with pytest.raises(InvalidValueError, match="'y': expected a float64 bucket-count vector of 0"):
        tracker.fold_moment_rows(["x", "y"], rows, ReduceType.AVG, {"x": buckets, "y": buckets})
    assert not tracker.export().points


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ("denominator", "scalar", "'x': recorded as a denominator, now as a scalar"),
        ("scalar", "denominator", "'x': recorded as a scalar, now as a denominator"),
        ("denominator", "stat", "'x': recorded as a denominator, now as a stat"),
        ("stat", "denominator", "'x': recorded as a stat, now as a denominator"),
    ],
)
def test_a_key_keeps_its_kind_and_a_refused_call_records_nothing(first, second, message):
    """A denominator key taken by scalar() or stat() (or the reverse) is refused, naming both
    kinds, before any of the call's keys is recorded; the window keeps what it held."""
    tracker = DistributedStatsTracker()
    mask = torch.tensor([True, False, True])
    tracker.denominator(m=mask)

    def record(kind: str, extra: str) -> None:
        if kind == "denominator":
            tracker.denominator(**{extra: mask, "x": mask})
        elif kind == "scalar":
            tracker.scalar(**{extra: 1.0, "x": 2.0})
        else:
            tracker.stat(denominator="m", **{extra: torch.ones(3), "x": torch.ones(3)})

    record(first, "a")
    expected = dict(tracker.export(reset=False))
    with pytest.raises(InvalidValueError, match=message):
        record(second, "b")
    assert dict(tracker.export()) == expected


def test_record_timing_records_the_clocks_difference(monkeypatch):
    """The value is the end minus the start of ``time.perf_counter``, exactly."""
    from types import SimpleNamespace

    import telemetry.record.tracker as tracker_module

    clock = iter([100.0, 250.5])  # the tracker's clock only (gRPC threads read the real one)
    monkeypatch.setattr(tracker_module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    tracker = DistributedStatsTracker()
    with tracker.record_timing("step"):
        pass
    monkeypatch.undo()
    assert tracker.export()["timeperf/step"] == 150.5


def test_values_and_masks_are_taken_by_keyword_only(tracker):
    """As in AReaL: a positional value is refused, never taken for the reduce group."""
    with pytest.raises(TypeError, match="positional"):
        tracker.scalar(1.0)
    with pytest.raises(TypeError, match="positional"):
        tracker.denominator(torch.ones(2, dtype=torch.bool))
    assert tracker.export() == {}


def test_an_unknown_denominator_lists_those_declared(tracker):
    with pytest.raises(
        UnknownDenominatorError, match=r"'x': unknown denominator 'n'; declared: none$"
    ):
        tracker.stat(x=torch.ones(2), denominator="n")
    tracker.denominator(valid=torch.ones(2, dtype=torch.bool))
    with pytest.raises(UnknownDenominatorError, match=r"declared: \['valid'\]$"):
        tracker.stat(x=torch.ones(2), denominator="n")


def test_declared_mask_is_the_mask_with_its_count(tracker):
    mask = torch.tensor([True, False, True])
    with tracker.scope("s"):
        tracker.denominator(valid=mask)
        declared = tracker.declared_mask("valid")
        with pytest.raises(UnknownDenominatorError, match="'s/n'"):
            tracker.declared_mask("n")
    assert torch.equal(declared.mask, mask) and float(declared.count) == 2.0
    with pytest.raises(UnknownDenominatorError, match="'valid'"):
        tracker.declared_mask("valid")  # declared in scope s only


def test_reset_drops_what_was_recorded(tracker):
    tracker.scalar(a=1.0)
    tracker.reset()
    assert tracker.export() == {}


def test_fold_moment_rows_with_an_odd_number_of_bounds():
    """Three bounds make four buckets (the count is the bounds plus one, for any number)."""
    tracker = DistributedStatsTracker()
    tracker.set_bucket_bounds("x", (0.0, 1.0, 2.0))
    rows = torch.tensor([[3.0, 2.0, 0.5, -2.5]], dtype=torch.float64)
    counts = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    tracker.fold_moment_rows(["x"], rows, ReduceType.AVG, {"x": counts})
    (point,) = tracker.export().points
    assert point.bucket_counts == (0, 1, 0, 1)
