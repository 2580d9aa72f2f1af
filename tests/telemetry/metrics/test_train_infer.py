"""Train/infer diagnostics against a plain-Python float64 reference of the seed's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.distributed as dist

from telemetry.metrics import train_infer
from telemetry.metrics.train_infer import DEFAULT_LOGP_DIFF_BOUNDS, record_train_infer
from telemetry.model.errors import InvalidValueError, MaskTypeError, ShapeMismatchError
from telemetry.model.snapshot import Histogram
from telemetry.record.tracker import DistributedStatsTracker
from tests.distributed import run_ranks

THRESHOLDS = (1.5, 2, 3, 5, 10)
P = "ppo_actor/train_infer/"


def reference(trainer, rollout, mask) -> dict[str, float]:
    """The seed's definitions, token by token in Python floats (pooled over all tokens)."""
    valid = [(t, r) for t, r, m in zip(trainer, rollout, mask, strict=True) if m]
    finite = [(t, r) for t, r in valid if math.isfinite(t) and math.isfinite(r)]
    out = {f"{P}n_valid_tokens": float(len(valid)), f"{P}n_finite_tokens": float(len(finite))}
    if valid:
        out[f"{P}nonfinite_logp_fraction"] = (len(valid) - len(finite)) / len(valid)
        for th in THRESHOLDS:
            tails = [abs(t - r) > math.log(th) for t, r in finite]
            out[f"{P}ratio_outside_{th:g}"] = (
                math.nan if len(finite) < len(valid) else sum(tails) / len(valid)
            )
    if finite:
        ds = [t - r for t, r in finite]
        n = len(ds)

        def mean(xs):
            return math.fsum(xs) / n

        def expm1(x):
            try:
                return math.expm1(x)
            except OverflowError:
                return math.inf

        out.update(
            {
                f"{P}logp_diff/avg": mean(ds),
                f"{P}logp_diff/min": min(ds),
                f"{P}logp_diff/max": max(ds),
                f"{P}logp_abs_diff/avg": mean(abs(d) for d in ds),
                f"{P}logp_abs_diff/min": min(abs(d) for d in ds),
                f"{P}logp_abs_diff/max": max(abs(d) for d in ds),
                f"{P}logp_diff_squared": mean(d * d for d in ds),
                f"{P}trainer_nll": mean(-t for t, _ in finite),
                f"{P}rollout_nll": mean(-r for _, r in finite),
                f"{P}kl_k1": mean(-d for d in ds),
                f"{P}kl_k2": mean(d * d / 2 for d in ds),
                f"{P}kl_k3": mean(expm1(d) - d for d in ds),
                f"{P}kl_k3_overflow_fraction": mean(math.isinf(expm1(d)) for d in ds),
            }
        )
    return out


def flat(*arrays: torch.Tensor) -> list[list[float]]:
    return [a.reshape(-1).tolist() for a in arrays]


def assert_matches(stats: dict, expected: dict) -> None:
    got = {k: v for k, v in stats.items() if k.startswith(P) and not k.endswith("__count")}
    assert set(got) == set(expected)
    for key, want in expected.items():
        if math.isnan(want):
            assert math.isnan(got[key]), key
        else:
            assert got[key] == pytest.approx(want, rel=1e-12, abs=1e-12), key


def record(tracker, trainer, rollout, mask, **kw) -> None:
    with tracker.scope("ppo_actor"):
        record_train_infer(trainer, rollout, mask, tracker=tracker, **kw)


def random_batch(seed: int, shape=(6, 37), dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    trainer = -torch.rand(shape, generator=gen, dtype=torch.float64) * 6
    rollout = trainer + torch.randn(shape, generator=gen, dtype=torch.float64) * 0.8
    mask = torch.rand(shape, generator=gen) > 0.35
    return trainer.to(dtype), rollout.to(dtype), mask


@pytest.fixture
def tracker() -> DistributedStatsTracker:
    return DistributedStatsTracker()


def test_random_masked_batches_match_reference(tracker):
    batches = [random_batch(0), random_batch(1, shape=(3, 11))]
    for trainer, rollout, mask in batches:
        record(tracker, trainer, rollout, mask)
    columns = [flat(*b) for b in batches]
    expected = reference(*([x for c in columns for x in c[i]] for i in range(3)))
    assert_matches(tracker.export(), expected)


def test_float32_inputs_are_computed_in_float64(tracker):
    trainer, rollout, mask = random_batch(2, dtype=torch.float32)
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer.double(), rollout.double(), mask)))


def test_integer_mask_equals_bool_mask(tracker):
    trainer, rollout, mask = random_batch(3)
    record(tracker, trainer, rollout, mask.to(torch.int64))
    assert_matches(tracker.export(), reference(*flat(trainer, rollout, mask)))


def test_no_valid_tokens_reports_counts_only(tracker):
    trainer, rollout, _ = random_batch(4)
    record(tracker, trainer, rollout, torch.zeros(trainer.shape, dtype=torch.bool))
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, torch.zeros(trainer.shape))))
    assert stats[f"{P}n_valid_tokens"] == 0.0
    assert f"{P}kl_k3" not in stats and f"{P}ratio_outside_2" not in stats


def test_nonfinite_on_valid_tokens_makes_tails_nan(tracker):
    trainer, rollout, mask = random_batch(5)
    mask[0, :4] = True
    trainer[0, 0], rollout[0, 1], trainer[0, 2], rollout[0, 3] = (
        math.nan,
        -math.inf,
        math.inf,
        math.nan,
    )
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))
    assert all(math.isnan(stats[f"{P}ratio_outside_{t:g}"]) for t in THRESHOLDS)
    assert stats[f"{P}nonfinite_logp_fraction"] == pytest.approx(4 / mask.sum().item())
    assert math.isfinite(stats[f"{P}kl_k3"]) and math.isfinite(stats[f"{P}logp_diff/max"])


def test_nonfinite_padding_never_counts(tracker):
    trainer, rollout, mask = random_batch(6)
    mask[1, :3] = False
    trainer[1, 0], rollout[1, 1], trainer[1, 2] = math.nan, math.inf, -math.inf
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))
    assert stats[f"{P}nonfinite_logp_fraction"] == 0.0
    assert not any(math.isnan(v) for v in stats.values())


def test_expm1_overflow_of_finite_diff(tracker):
    trainer, rollout, mask = random_batch(7)
    mask[2, 5] = mask[2, 6] = True
    trainer[2, 5], rollout[2, 5] = -1.0, -800.0  # d = 799: expm1 overflows in float64
    trainer[2, 6], rollout[2, 6] = -1.0, -700.0  # d = 699: still finite
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))
    assert stats[f"{P}kl_k3_overflow_fraction"] == pytest.approx(1 / mask.sum().item())
    assert stats[f"{P}kl_k3"] == math.inf
    assert stats[f"{P}nonfinite_logp_fraction"] == 0.0


def test_logp_diff_buckets_match_numpy(tracker):
    trainer, rollout, mask = random_batch(8)
    record(tracker, trainer, rollout, mask)
    record(tracker, trainer * 0.5, rollout, mask)
    (point,) = [
        p
        for p in tracker.export().points
        if isinstance(p, Histogram) and p.metric == P + "logp_diff"
    ]
    d = np.concatenate([(trainer - rollout)[mask].numpy(), (trainer * 0.5 - rollout)[mask].numpy()])
    bounds = np.array(DEFAULT_LOGP_DIFF_BOUNDS)
    # OTel explicit buckets: bucket i holds (bounds[i-1], bounds[i]].
    expected = np.bincount(np.searchsorted(bounds, d, side="left"), minlength=bounds.size + 1)
    assert point.bounds == DEFAULT_LOGP_DIFF_BOUNDS
    assert list(point.bucket_counts) == expected.tolist()
    assert sum(point.bucket_counts) == point.count == 2 * mask.sum().item()


def test_custom_bounds_and_no_bounds(tracker):
    trainer, rollout, mask = random_batch(9)
    record(tracker, trainer, rollout, mask, logp_diff_bounds=(-1.0, 1.0))
    (point,) = [p for p in tracker.export().points if p.metric == P + "logp_diff"]
    d = (trainer - rollout)[mask]
    expected = [int((d <= -1).sum()), int(((d > -1) & (d <= 1)).sum()), int((d > 1).sum())]
    assert point.bounds == (-1.0, 1.0) and list(point.bucket_counts) == expected
    other = DistributedStatsTracker()
    record(other, trainer, rollout, mask, logp_diff_bounds=None)
    (point,) = [p for p in other.export().points if p.metric == P + "logp_diff"]
    assert point.bounds == () and point.bucket_counts == ()


def test_chunked_processing_pools_exactly(tracker, monkeypatch):
    trainer, rollout, mask = random_batch(10, shape=(9, 13))
    trainer[4, 2] = math.nan
    mask[4, 2] = True
    monkeypatch.setattr(train_infer, "CHUNK_TOKENS", 20)  # one row (13 tokens) per chunk
    assert len(train_infer.row_chunks(9, 13)) == 9
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer, rollout, mask)))


def test_one_dimensional_and_packed_inputs(tracker):
    trainer, rollout, mask = random_batch(11, shape=(50,))
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer, rollout, mask)))


def test_shape_and_mask_errors_name_the_key(tracker):
    trainer, rollout, mask = random_batch(12)
    with pytest.raises(ShapeMismatchError, match="ppo_actor/train_infer"):
        record(tracker, trainer, rollout[:, :-1], mask)
    with pytest.raises(ShapeMismatchError, match="mask shape"):
        record(tracker, trainer, rollout, mask[:-1])
    with pytest.raises(MaskTypeError, match="'ppo_actor/train_infer/mask'"):
        record(tracker, trainer, rollout, mask.double())
    with pytest.raises(InvalidValueError, match="'ppo_actor/train_infer'.*trainer_logp"):
        record(tracker, trainer.tolist(), rollout, mask)


def test_recording_never_reads_values_on_the_host(tracker):
    # Meta tensors have no data: any .item()/bool()/.cpu() in the hot path would raise.
    trainer = torch.empty(4, 64, device="meta")
    mask = torch.empty(4, 64, dtype=torch.bool, device="meta")
    record(tracker, trainer, trainer, mask)
    # The same code path on real tensors records the reference values.
    real = DistributedStatsTracker()
    trainer, rollout, mask = random_batch(21, shape=(4, 64))
    record(real, trainer, rollout, mask)
    assert_matches(real.export(), reference(*flat(trainer, rollout, mask)))


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_ratio_outside_boundary_is_strict(tracker, threshold):
    # abs(d) exactly log t is inside; one ulp above is outside (on both signs of d).
    edge = math.log(threshold)
    above = math.nextafter(edge, math.inf)
    diffs = [edge, -edge, above, -above, math.nextafter(edge, 0.0)]
    rollout = torch.full((len(diffs),), -3.0, dtype=torch.float64)
    trainer = rollout + torch.tensor(diffs, dtype=torch.float64)
    mask = torch.ones(len(diffs), dtype=torch.bool)
    record(tracker, trainer, rollout, mask)
    expected = reference(*flat(trainer, rollout, mask))
    got = tracker.export()
    key = f"{P}ratio_outside_{threshold:g}"
    assert got[key] == expected[key]
    d = (trainer - rollout).tolist()
    assert expected[key] == sum(abs(x) > edge for x in d) / len(d)


def test_default_tracker_and_scope():
    from telemetry import stats_tracker

    trainer, rollout, mask = random_batch(13)
    with stats_tracker.scope("ppo_actor"):
        record_train_infer(trainer, rollout, mask)
    stats = stats_tracker.export(key="ppo_actor/train_infer")
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))


def _two_ranks(rank: int, world: int) -> dict:
    shapes = [(3, 17), (5, 9)]  # unequal token counts
    trainer, rollout, mask = random_batch(100 + rank, shape=shapes[rank])
    if rank == 1:
        mask[0, 0] = True
        trainer[0, 0] = math.inf  # non-finite on one rank only: tails NaN everywhere
    tracker = DistributedStatsTracker()
    record(tracker, trainer, rollout, mask)
    return dict(tracker.export(reduce_group=dist.group.WORLD))


def test_two_gloo_ranks_equal_single_process_on_concatenated_data():
    results = run_ranks(_two_ranks, 2)
    columns = []
    for rank, shape in enumerate([(3, 17), (5, 9)]):
        trainer, rollout, mask = random_batch(100 + rank, shape=shape)
        if rank == 1:
            mask[0, 0] = True
            trainer[0, 0] = math.inf
        columns.append(flat(trainer, rollout, mask))
    expected = reference(*(columns[0][i] + columns[1][i] for i in range(3)))
    assert math.isnan(expected[f"{P}ratio_outside_2"])
    for stats in results:
        assert_matches(stats, expected)


def test_extremes_of_the_valid_token_fractions_match_their_indicators(tracker):
    # Histogram min/max of nonfinite_logp_fraction and the tails, against the per-token
    # indicators: 0/1, and NaN for a tail on a non-finite valid token.
    cases = {
        "all finite": ([-1.0, -1.0, -0.1], [-1.0, -2.5, -0.1], [True, True, True]),  # |d| 0, 1.5, 0
        "all non-finite": ([math.nan, -math.inf, -1.0], [-1.0, -2.0, -1.0], [True, True, False]),
    }
    for name, (t, r, m) in cases.items():
        local = DistributedStatsTracker()
        trainer, rollout = (
            torch.tensor(t, dtype=torch.float64),
            torch.tensor(r, dtype=torch.float64),
        )
        record(local, trainer, rollout, torch.tensor(m))
        points = {p.key: p for p in local.export().points}
        valid = [(a, b) for a, b, keep in zip(t, r, m, strict=True) if keep]
        nonfinite = [float(not (math.isfinite(a) and math.isfinite(b))) for a, b in valid]
        got = points[f"{P}nonfinite_logp_fraction"]
        assert (got.min, got.max) == (min(nonfinite), max(nonfinite)), name
        tails = [
            abs(a - b) > math.log(2.0) if math.isfinite(a) and math.isfinite(b) else math.nan
            for a, b in valid
        ]
        got = points[f"{P}ratio_outside_2"]
        if any(math.isnan(x) for x in tails):
            assert math.isnan(got.min) and math.isnan(got.max), name
        else:
            assert (got.min, got.max) == (float(min(tails)), float(max(tails))), name


def reference_extremes(trainer, rollout, mask) -> dict[str, tuple[float, float]]:
    """(min, max) of every key's per-token values (Python floats), as its point reports."""
    finite = [
        (t, r)
        for t, r, m in zip(trainer, rollout, mask, strict=True)
        if m and math.isfinite(t) and math.isfinite(r)
    ]
    if not finite:
        return {}
    ds = [t - r for t, r in finite]

    def k3(d: float) -> float:
        try:
            return math.expm1(d) - d
        except OverflowError:
            return math.inf

    values = {
        "logp_diff": ds,
        "logp_abs_diff": [abs(d) for d in ds],
        "logp_diff_squared": [d * d for d in ds],
        "trainer_nll": [-t for t, _ in finite],
        "rollout_nll": [-r for _, r in finite],
        "kl_k1": [-d for d in ds],
        "kl_k2": [d * d / 2 for d in ds],
        "kl_k3": [k3(d) for d in ds],
        "kl_k3_overflow_fraction": [float(math.isinf(k3(d))) for d in ds],
    }
    return {P + key: (min(xs), max(xs)) for key, xs in values.items()}


def assert_extremes_match(source, expected: dict[str, tuple[float, float]], rel: float) -> None:
    """The points' min and max against ``expected``; ``source``: a tracker (exported
    here) or its exported points."""
    points = source.export().points if isinstance(source, DistributedStatsTracker) else source
    points = {p.metric: p for p in points if isinstance(p, Histogram)}
    for key, (low, high) in expected.items():
        assert points[key].min == pytest.approx(low, rel=rel, abs=0), key
        assert points[key].max == pytest.approx(high, rel=rel, abs=0), key


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_extremes_of_every_key_match_the_reference(dtype):
    # d^2 and kl_k3 take their extremes from those of abs(d) and d; kl_k3's maximum is at
    # an end of d's range (it falls for d < 0, rises for d > 0): both signs, an overflow.
    trainer, rollout, mask = random_batch(30, dtype=dtype)
    trainer[0, :4] = torch.tensor([math.nan, -math.inf, -1.0, -2.0], dtype=dtype)
    rollout[0, :4] = torch.tensor([-1.0, -1.0, -800.0, -1.0], dtype=dtype)  # d = 799
    mask[0, :4] = True
    cases = {
        "with overflow": (trainer, rollout, mask),
        "all finite": (trainer[1:], rollout[1:], mask[1:]),
        "max kl_k3 at min d": (trainer[1:] - 4, rollout[1:], mask[1:]),
    }
    for name, (t, r, m) in cases.items():
        tracker = DistributedStatsTracker()
        record(tracker, t, r, m)
        expected = reference_extremes(*flat(t.double(), r.double(), m))
        assert math.isinf(expected[P + "kl_k3"][1]) == (name == "with overflow")
        # Exact, but for the last bit of expm1 where kl_k3's maximum is at an end of d.
        assert_extremes_match(tracker, expected, rel=1e-14)
    d = (t - r)[m].double()
    assert torch.expm1(d.min()) - d.min() > torch.expm1(d.max()) - d.max()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_are_widened_exactly(tracker, dtype):
    trainer, rollout, mask = random_batch(31, dtype=dtype)
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer.double(), rollout.double(), mask)))


def test_float32_comparisons_stay_within_one_float32_ulp_of_each_bound():
    # Adversarial float32 inputs: d = t - r (exact in float64) within a few float32 ulps
    # of every bound and tail threshold, on both sides. Counts compare d rounded to
    # float32, so a token may only fall on the wrong side of a bound when d is within one
    # float32 ulp of it; sums and extremes stay those of the float64 values.
    gen = torch.Generator().manual_seed(32)
    levels = torch.tensor([*DEFAULT_LOGP_DIFF_BOUNDS, *(math.log(t) for t in THRESHOLDS)])
    rollout = -torch.rand(levels.numel(), 400, generator=gen, dtype=torch.float64) * 8
    offsets = torch.randint(-6, 7, rollout.shape, generator=gen) * 2.0**-24
    trainer = (rollout + levels.double().unsqueeze(1) * (1 + offsets)).float()
    rollout = rollout.float()
    mask = torch.ones(trainer.shape, dtype=torch.bool)
    tracker = DistributedStatsTracker()
    record(tracker, trainer, rollout, mask)
    record(check := DistributedStatsTracker(), trainer, rollout, mask)
    exported = check.export().points
    points = {p.metric: p for p in exported}
    d = (trainer.double() - rollout.double()).reshape(-1)
    ulp = lambda x: math.ulp(x) * 2.0**29  # noqa: E731  (float32 ulp of a normal float64)
    n = d.numel()
    for t in THRESHOLDS:
        edge = math.log(t)
        point = points[f"{P}ratio_outside_{t:g}"]
        tail = point.sum
        # The indicator's extremes agree with the count, whichever side a tie fell.
        assert (point.min, point.max) == (float(tail == n), float(tail > 0))
        assert (
            int((d.abs() > edge + ulp(edge)).sum())
            <= tail
            <= int((d.abs() >= edge - ulp(edge)).sum())
        )
    buckets = points[P + "logp_diff"].bucket_counts
    above = [n - sum(buckets[: i + 1]) for i in range(len(DEFAULT_LOGP_DIFF_BOUNDS))]
    for bound, count in zip(DEFAULT_LOGP_DIFF_BOUNDS, above, strict=True):
        width = ulp(bound) if bound else 0.0
        assert int((d > bound + width).sum()) <= count <= int((d > bound - width).sum())
    # Some tokens do sit in that band: the test would pass trivially otherwise.
    assert any(
        int((d > b + ulp(b)).sum()) < int((d > b - ulp(b)).sum()) for b in levels.tolist() if b
    )
    args = flat(trainer.double(), rollout.double(), mask)
    assert_extremes_match(exported, reference_extremes(*args), rel=1e-14)
    stats = tracker.export()
    expected = reference(*args)
    ratios = [key for key in expected if "ratio_outside" in key]
    assert_matches(
        {k: v for k, v in stats.items() if k not in ratios},
        {k: v for k, v in expected.items() if k not in ratios},
    )


def test_float64_inputs_compare_exactly_at_float32_ties(tracker):
    # The same band in float64 inputs: every count is exact.
    gen = torch.Generator().manual_seed(33)
    rollout = -torch.rand(5, 200, generator=gen, dtype=torch.float64) * 8
    logs = torch.tensor([math.log(t) for t in THRESHOLDS], dtype=torch.float64).unsqueeze(1)
    trainer = rollout + logs * (1 + torch.randint(-3, 4, rollout.shape, generator=gen) * 2.0**-52)
    mask = torch.ones(trainer.shape, dtype=torch.bool)
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer, rollout, mask)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_magnitude_logprobs(tracker, dtype):
    # Engines write huge negative numbers for impossible tokens: d, d^2 and expm1 stay
    # float64 (no float32 overflow of d^2 or kl_k3), and the float32 extremes are exact.
    # (No cancellation between the huge terms: the reference sums exactly, with fsum.)
    big = torch.finfo(torch.float32).max
    trainer = torch.tensor([-1e30, -big, -3.0, -1e4, -0.5, -2e19], dtype=dtype)
    rollout = torch.tensor([-2.0, -1.0, -1.0, -1.0, -1e30, -1.0], dtype=dtype)
    mask = torch.ones(6, dtype=torch.bool)
    record(tracker, trainer, rollout, mask)
    args = flat(trainer.double(), rollout.double(), mask)
    assert_matches(tracker.export(), reference(*args))
    check = DistributedStatsTracker()
    record(check, trainer, rollout, mask)
    assert_extremes_match(check, reference_extremes(*args), rel=1e-15)


def test_float64_difference_overflow_makes_kl_k3_nan(tracker):
    # d = t - r overflows float64 to +inf: expm1(inf) - inf is NaN, as in the reference.
    trainer = torch.tensor([1.7e308, -1.0, -2.0], dtype=torch.float64)
    rollout = torch.tensor([-1.7e308, -1.5, -1.0], dtype=torch.float64)
    mask = torch.ones(3, dtype=torch.bool)
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))
    assert math.isnan(stats[P + "kl_k3"]) and stats[P + "logp_diff/max"] == math.inf


def test_inputs_that_require_grad_and_a_stat_on_the_finite_tokens(tracker):
    # Recording runs in inference mode on detached inputs; the finite mask it declares
    # serves a later stat() like any other denominator.
    trainer, rollout, mask = random_batch(34)
    weights = trainer.clone().requires_grad_(True)
    record(tracker, weights * 1.0, rollout, mask)
    with tracker.scope("ppo_actor"), tracker.scope("train_infer"):
        tracker.stat(denominator="n_finite_tokens", doubled=((trainer - rollout) * 2).reshape(-1))
    stats = tracker.export()
    expected = reference(*flat(trainer, rollout, mask))
    assert_matches({k: v for k, v in stats.items() if "doubled" not in k}, expected)
    assert stats[P + "doubled/avg"] == pytest.approx(2 * expected[P + "logp_diff/avg"])
    assert weights.grad is None


def test_integer_logprobs_are_widened_and_bool_or_complex_refused(tracker):
    trainer, rollout, mask = random_batch(35)
    trainer_int, rollout_int = trainer.round().to(torch.int64), rollout.round().to(torch.int64)
    record(tracker, trainer_int, rollout_int, mask)
    assert_matches(
        tracker.export(), reference(*flat(trainer_int.double(), rollout_int.double(), mask))
    )
    for bad in (mask, trainer.to(torch.complex128)):
        with pytest.raises(InvalidValueError, match="'ppo_actor/train_infer'.*trainer_logp"):
            record(tracker, bad, rollout, mask)


def test_default_logp_diff_buckets_are_at_zero_and_plus_minus_log_of_each_threshold():
    # docs/metrics.md: "buckets at 0, ±log{1.5,2,3,5,10}"
    logs = [math.log(t) for t in THRESHOLDS]
    bounds = list(DEFAULT_LOGP_DIFF_BOUNDS)
    assert bounds == pytest.approx(sorted([0.0, *logs, *(-x for x in logs)]), rel=1e-15)


def test_a_zero_dimensional_token_is_one_row(tracker):
    trainer, rollout, mask = torch.tensor(-1.0), torch.tensor(-1.5), torch.tensor(True)
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference([-1.0], [-1.5], [True]))


def test_a_row_longer_than_a_chunk_is_one_chunk_of_its_own(tracker, monkeypatch):
    trainer, rollout, mask = random_batch(13, shape=(1, 20))
    monkeypatch.setattr(train_infer, "CHUNK_TOKENS", 8)  # the one row holds 20 tokens
    record(tracker, trainer, rollout, mask)
    assert_matches(tracker.export(), reference(*flat(trainer, rollout, mask)))


def test_shape_errors_for_larger_inputs_and_mask_type_errors_name_what_was_given(tracker):
    trainer, rollout, mask = random_batch(14)
    wider = torch.cat([rollout, rollout[:, :1]], dim=1)
    with pytest.raises(ShapeMismatchError, match="does not match"):
        record(tracker, trainer, wider, mask)  # rollout larger than trainer
    with pytest.raises(ShapeMismatchError, match="mask shape"):
        record(tracker, trainer, rollout, torch.cat([mask, mask[:1]]))  # a larger mask
    with pytest.raises(MaskTypeError, match="torch.float64"):
        record(tracker, trainer, rollout, mask.double())
    with pytest.raises(MaskTypeError, match="got list"):
        record(tracker, trainer, rollout, mask.tolist())


@pytest.mark.parametrize("shape", [(0,), (0, 8), (4, 0)])
def test_an_input_without_tokens_is_refused_naming_the_mask(shape):
    tracker = DistributedStatsTracker()
    empty = torch.zeros(shape)
    with pytest.raises(InvalidValueError, match=r"'train_infer/mask': empty mask"):
        record_train_infer(empty, empty, torch.zeros(shape, dtype=torch.bool), tracker=tracker)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_levels", [0, 1, 2, 5])
def test_one_pass_with_few_thresholds_against_numpy(dtype, n_levels):
    # reduce_chunk on its own (public), with fewer thresholds than the rows its minima
    # need: sums, extremes and counts against numpy in float64.
    from telemetry.metrics.logp_pass import reduce_chunk
    from telemetry.record.scratch import Scratch

    trainer, rollout, mask = random_batch(40, shape=(300,), dtype=dtype)
    trainer[:3] = torch.tensor([math.nan, math.inf, -1.0], dtype=dtype)
    mask[:3] = True
    mask[3] = False
    levels = torch.linspace(-1.0, 1.0, n_levels, dtype=torch.float64).to(dtype).unsqueeze(1)
    got = reduce_chunk(trainer, rollout, mask, levels, levels[:0], Scratch(torch.device("cpu")))
    t, r, m = trainer.double().numpy(), rollout.double().numpy(), mask.numpy()
    keep = m & np.isfinite(t) & np.isfinite(r)
    t, r = t[keep], r[keep]
    d = t - r
    rows = [d, np.abs(d), np.expm1(d) - d, d * d, np.isinf(np.expm1(d)), t, r]
    assert got.finite.tolist() == keep.tolist()
    np.testing.assert_allclose(got.sums.numpy(), [np.sum(x) for x in rows], rtol=1e-13)
    assert got.low.tolist() == [d.min(), np.abs(d).min(), (np.expm1(d) - d).min()]
    assert got.high.tolist() == [d.max()]
    assert got.logp_low.tolist() == [t.min(), r.min()]
    assert got.logp_high.tolist() == [t.max(), r.max()]
    compared = d.astype(np.float32) if dtype == torch.float32 else d
    expected = [int((compared > x).sum()) for x in levels.reshape(-1).numpy()]
    assert got.above.tolist() == expected


@pytest.mark.parametrize("others", [(0.5, -1.0), (-0.5, -2.0)])
def test_float64_difference_overflow_to_minus_inf(tracker, others):
    # d = t - r overflows to -inf on a finite valid token: logp_diff/max stays that of
    # the other tokens (positive or negative), min is -inf (numpy reference in float64).
    rollout = torch.tensor([1.7e308, -1.5, -1.0], dtype=torch.float64)
    trainer = torch.tensor([-1.7e308, 0.0, 0.0], dtype=torch.float64)
    trainer[1:] = rollout[1:] + torch.tensor(others, dtype=torch.float64)
    mask = torch.ones(3, dtype=torch.bool)
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer, rollout, mask)))
    d = trainer.numpy() - rollout.numpy()
    assert stats[P + "logp_diff/max"] == d.max() == max(others)
    assert stats[P + "logp_diff/min"] == -math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_token_outside_makes_the_tail_indicator_min_one(dtype):
    # All finite tokens outside log 2 (but not log 3): ratio_outside_2 is 1 on every token,
    # its histogram min and max both 1; ratio_outside_3 is 0 on every token.
    rollout = torch.tensor([-1.0, -2.0, -0.5, -3.0], dtype=dtype)
    trainer = rollout + torch.tensor([0.8, -0.9, 1.0, -0.75], dtype=dtype)
    mask = torch.ones(4, dtype=torch.bool)
    tracker = DistributedStatsTracker()
    record(tracker, trainer, rollout, mask)
    points = {p.key: p for p in tracker.export().points}
    d = trainer.double().numpy() - rollout.double().numpy()
    for t in THRESHOLDS:
        outside = (np.abs(d) > math.log(t)).astype(float)
        got = points[f"{P}ratio_outside_{t:g}"]
        assert (got.min, got.max, got.sum) == (outside.min(), outside.max(), outside.sum()), t
    assert (points[f"{P}ratio_outside_2"].min, points[f"{P}ratio_outside_3"].max) == (1.0, 0.0)


@pytest.mark.parametrize("bounds", [None, (-1.0, 0.25)])
def test_float32_inputs_without_the_default_bounds(tracker, bounds):
    # In float32 the tails come from counts of d above +-log t, which must be compared
    # whatever the bucket bounds (none, or others than +-log t).
    trainer, rollout, mask = random_batch(41, dtype=torch.float32)
    record(tracker, trainer, rollout, mask, logp_diff_bounds=bounds)
    exported = tracker.export()
    assert_matches(exported, reference(*flat(trainer.double(), rollout.double(), mask)))
    (point,) = [p for p in exported.points if p.metric == P + "logp_diff"]
    d = (trainer.double() - rollout.double())[mask].numpy()
    edges = np.array(bounds or ())
    expected = np.bincount(np.searchsorted(edges, d, side="left"), minlength=edges.size + 1)
    assert list(point.bucket_counts) == (expected.tolist() if bounds else [])


def test_float32_difference_rounding_onto_a_bound_counts_as_exactly_on_it(tracker):
    # d = float32(-log 2) + 2**-30 is exactly above float32(-log 2), and rounds to it in
    # float32; exactly, abs(d) > log 2 and d < -log 2 (float32(-log 2) is below -log 2 by
    # more than 2**-30). Compared in float32, as documented, the token is outside and in
    # the bucket ending at -log 2, as the exact float64 reference says.
    rollout = torch.tensor([-(2.0**-30), -1.0, -2.0], dtype=torch.float32)
    trainer = torch.tensor([-math.log(2), -1.1, -1.5], dtype=torch.float32)
    mask = torch.ones(3, dtype=torch.bool)
    d = trainer.double().numpy() - rollout.double().numpy()
    assert np.float32(d[0]) == np.float32(-math.log(2)) < d[0] < -math.log(2)
    record(tracker, trainer, rollout, mask)
    stats = tracker.export()
    assert_matches(stats, reference(*flat(trainer.double(), rollout.double(), mask)))
    (point,) = [p for p in stats.points if p.metric == P + "logp_diff"]
    bounds = np.array(DEFAULT_LOGP_DIFF_BOUNDS)
    expected = np.bincount(np.searchsorted(bounds, d, side="left"), minlength=bounds.size + 1)
    assert list(point.bucket_counts) == expected.tolist()
