"""RolloutMerger: count-weighted merge of workers, attached to the next training step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collector.merge import RolloutMerger
from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)

RUN = (("rltel.experiment", "e"), ("rltel.trial", "t"))


def worker(i: int, points, stream: str = "rollout") -> Snapshot:
    resource = (*RUN, ("rltel.role", stream), ("rltel.worker_id", f"w{i}"))
    return Snapshot(tuple(points), None, resource, 100 + i, stream)


def train(step: int) -> Snapshot:
    return Snapshot((), Step(0, step, step), (*RUN, ("rltel.rank", 0)), 1000 + step)


def controller_rule(all_raw_stats: list[dict]) -> dict:
    """AReaL's RolloutController.export_stats, transcribed from the seed as the reference."""
    stats: dict[str, float] = {}
    counts: dict[str, float] = {}
    for raw in all_raw_stats:
        for k, v in raw.items():
            if k.endswith("__count"):
                counts[k] = counts.get(k, 0) + v
            else:
                stats[k] = stats.get(k, 0.0) + v * raw.get(k + "__count", 0)
    return {k: v / counts[k + "__count"] for k, v in stats.items() if counts.get(k + "__count")}


def test_scalar_streams_merge_count_weighted_like_the_rollout_controller():
    rng = np.random.default_rng(1)
    merger = RolloutMerger()
    raws = []
    for i in range(3):
        for _window in range(2):
            rewards = rng.normal(size=rng.integers(1, 9))
            turns = rng.integers(1, 5, size=rng.integers(1, 4)).astype(float)
            raws.append(
                {
                    "rollout/reward": rewards.mean(),
                    "rollout/reward__count": len(rewards),
                    "rollout/turns": turns.mean(),
                    "rollout/turns__count": len(turns),
                }
            )
            merger.add(
                worker(
                    i,
                    [
                        ScalarMean("rollout/reward", float(rewards.mean()), len(rewards)),
                        ScalarMean("rollout/turns", float(turns.mean()), len(turns)),
                    ],
                )
            )
    assert merger.on_train(Snapshot((), None, RUN)) == []  # no step: nothing released
    (merged,) = merger.on_train(train(5))
    assert merged.step == Step(0, 5, 5)
    assert merged.stream == "rollout"
    assert dict(merged.resource)["rltel.experiment"] == "e"
    flat = merged.flat()
    reference = controller_rule(raws)
    assert flat.keys() == reference.keys()
    for key, value in reference.items():
        assert flat[key] == pytest.approx(value, rel=1e-12)
    counts = merged.flat(include_counts=True)
    assert counts["rollout/reward__count"] == sum(r["rollout/reward__count"] for r in raws)


def test_windows_are_released_once_per_new_step_and_per_stream():
    merger = RolloutMerger()
    merger.add(worker(0, [ScalarMean("r", 1.0, 1), Gauge("rltel/otlp/queue_depth", 3.0)]))
    merger.add(worker(1, [ScalarMean("r", 4.0, 3)], stream="eval"))
    released = {s.stream: s for s in merger.on_train(train(1))}
    assert released["rollout"].flat() == {"r": 1.0}
    assert released["eval"].flat() == {"r": 4.0}
    merger.add(worker(0, [ScalarMean("r", 2.0, 1)]))
    assert merger.on_train(train(1)) == []  # the same step again (another rank): held
    assert merger.on_train(train(0)) == []  # an older step: held
    (later,) = merger.on_train(train(2))
    assert later.flat() == {"r": 2.0} and later.step.global_step == 2
    merger.add(worker(0, [ScalarMean("r", 3.0, 2)]))
    (pending,) = merger.flush()
    assert pending.step.global_step == 2 and pending.flat() == {"r": 3.0}
    assert merger.flush() == []


def test_histograms_counters_and_plain_gauges():
    merger = RolloutMerger()
    values = [np.array([1.0, 5.0]), np.array([-2.0, 0.5, 0.7]), np.array([3.0])]
    bounds = (0.0, 2.0)
    for i, v in enumerate(values):
        buckets = tuple(int(x) for x in np.histogram(v, [-np.inf, *bounds, np.inf])[0])
        merger.add(
            worker(
                i,
                [
                    Histogram(
                        "len",
                        len(v),
                        float(v.sum()),
                        float(v.min()),
                        float(v.max()),
                        bounds,
                        buckets,
                    ),
                    Histogram("tok", len(v), float(v.sum()), reduce=StatReduce.SUM),
                    Counter("tokens", 10.0 * (i + 1), start_time_unix_nano=7 + i),
                    Gauge("queue", float(i)),
                ],
            )
        )
    merger.add(worker(0, [Counter("tokens", 15.0, start_time_unix_nano=7)]))  # newer total
    (merged,) = merger.on_train(train(3))
    by_key = {p.key: p for p in merged.points}
    every = np.concatenate(values)
    assert by_key["len"].count == len(every)
    assert by_key["len"].avg == pytest.approx(every.mean())
    assert (by_key["len"].min, by_key["len"].max) == (every.min(), every.max())
    expected = np.histogram(every, [-np.inf, *bounds, np.inf])[0]
    assert by_key["len"].bucket_counts == tuple(int(c) for c in expected)
    assert merged.flat()["tok"] == pytest.approx(every.sum())
    assert by_key["tokens"] == Counter("tokens", 15.0 + 20.0 + 30.0, start_time_unix_nano=7)
    assert by_key["queue"].value == pytest.approx(1.0)
    merger.add(worker(1, [Counter("tokens", 25.0, start_time_unix_nano=8)]))
    (next_window,) = merger.on_train(train(4))
    assert next_window.flat() == {"tokens": 15.0 + 25.0 + 30.0}


@pytest.mark.parametrize("second_bounds", [(0.0, 2.0), (0.0, 1.0)])  # above and below
def test_differing_bounds_keep_counts_only_and_plain_gauges_average_exactly(second_bounds):
    merger = RolloutMerger()
    merger.add(worker(0, [Histogram("d", 2, 3.0, 1.0, 2.0, (0.0, 1.5), (0, 1, 1))]))
    merger.add(worker(1, [Histogram("d", 1, 4.0, 4.0, 4.0, second_bounds, (0, 0, 1))]))
    merger.add(worker(2, [Histogram("d", 1, 0.5, 0.5, 0.5, (0.0, 1.5), (0, 1, 0))]))
    for i, value in enumerate((0.5, 1.0)):
        merger.add(worker(i, [Gauge("queue", value)]))
    (merged,) = merger.on_train(train(1))
    by_key = {p.key: p for p in merged.points}
    assert (by_key["d"].count, by_key["d"].sum) == (4, 7.5)
    assert (by_key["d"].bounds, by_key["d"].bucket_counts) == ((), ())  # bounds disagreed
    assert by_key["queue"].value == 0.75  # the mean of the workers' latest values


def test_same_bounds_keep_bounds_and_buckets_and_the_run_resource():
    merger = RolloutMerger()
    for i in range(2):
        merger.add(worker(i, [Histogram("d", 1, 0.5, 0.5, 0.5, (0.0, 1.0), (0, 1, 0))]))
    (merged,) = merger.on_train(train(1))
    (point,) = merged.points
    assert (point.bounds, point.bucket_counts) == ((0.0, 1.0), (0, 2, 0))
    assert merged.resource == (*RUN, ("rltel.role", "rollout"), ("rltel.stream", "rollout"))
    assert merged.stream == "rollout" and merged.step == Step(0, 1, 1)


def test_a_senders_own_health_points_are_not_merged_but_the_rest_of_its_snapshot_is():
    merger = RolloutMerger()
    merger.add(worker(0, [Gauge("rltel/otlp/queue_depth", 3.0), ScalarMean("reward", 1.0, 2)]))
    (merged,) = merger.on_train(train(1))
    assert merged.flat() == {"reward": 1.0}


def test_an_empty_scalar_window_is_left_out():
    merger = RolloutMerger()
    merger.add(worker(0, [ScalarMean("reward", float("nan"), 0), ScalarMean("len", 3.0, 1)]))
    (merged,) = merger.on_train(train(1))
    assert merged.flat() == {"len": 3.0}


def test_step_is_the_highest_training_step_seen():
    merger = RolloutMerger()
    assert merger.step is None
    merger.on_train(train(4))
    merger.on_train(train(2))  # an older step (another rank lagging): not a new one
    assert merger.step == Step(0, 4, 4)


def test_the_released_time_is_the_latest_worker_time():
    merger = RolloutMerger()
    merger.add(worker(0, [ScalarMean("r", 1.0, 1)]))  # time 100
    merger.add(worker(3, [ScalarMean("r", 2.0, 1)]))  # time 103
    merger.add(worker(1, [ScalarMean("r", 3.0, 1)]))  # time 101
    (merged,) = merger.on_train(train(1))
    assert merged.time_unix_nano == 103
    untimed = RolloutMerger()  # senders that set no time (0): the merged window has none
    untimed.add(Snapshot((ScalarMean("r", 1.0, 1),), None, RUN, stream="rollout"))
    (merged,) = untimed.on_train(train(1))
    assert merged.time_unix_nano == 0


def test_the_run_resource_comes_from_whichever_process_reported_first():
    bare_train = Snapshot((), Step(0, 1, 1), (("rltel.rank", 0),), 1001)
    merger = RolloutMerger()
    merger.add(worker(0, [ScalarMean("r", 1.0, 1)]))  # names the run
    (merged,) = merger.on_train(bare_train)  # names no run: the worker's names are kept
    assert merged.resource[:2] == RUN
    merger = RolloutMerger()
    merger.on_train(train(1))  # the trainer names the run first
    bare_worker = Snapshot(
        (ScalarMean("r", 1.0, 1),), None, (("rltel.worker_id", "w0"),), 5, "rollout"
    )
    merger.add(bare_worker)
    (merged,) = merger.on_train(train(2))
    assert merged.resource == (*RUN, ("rltel.role", "rollout"), ("rltel.stream", "rollout"))


def test_equal_bounds_decoded_separately_keep_their_buckets():
    # Every decoded point carries its own bounds tuple: equal, never the same object.
    merger = RolloutMerger()
    for i in range(2):
        bounds = tuple(np.array([0.0, 1.0]).tolist())
        merger.add(worker(i, [Histogram("d", 2, 1.0, 0.0, 1.0, bounds, (1, 1, 0))]))
    (merged,) = merger.on_train(train(1))
    (point,) = merged.points
    assert (point.bounds, point.bucket_counts) == ((0.0, 1.0), (2, 2, 0))


def stat_window(values: np.ndarray, bounds: tuple[float, ...] = (0.0,)) -> Histogram:
    """A masked stat's window as the recorder makes it: a NaN on a valid token makes the
    sum, min and max NaN and lands in the ``+Inf`` bucket."""
    finite = values[~np.isnan(values)]
    buckets = np.histogram(finite, [-np.inf, *bounds, np.inf])[0]
    buckets[-1] += len(values) - len(finite)
    return Histogram(
        "loss",
        len(values),
        float(values.sum()),
        float(values.min()),
        float(values.max()),
        bounds,
        tuple(int(c) for c in buckets),
    )


@pytest.mark.parametrize("nan_worker", [0, 1])  # a NaN wins whichever worker comes first
def test_a_nan_in_one_workers_window_makes_that_steps_merge_nan_and_the_next_step_whole(
    nan_worker,
):
    merger = RolloutMerger()
    values = [np.array([0.5, -1.0]), np.array([2.0, 0.25, 1.0])]
    values[nan_worker] = np.array([0.5, np.nan])
    for i, v in enumerate(values):
        reward = float("nan") if i == nan_worker else 1.5
        merger.add(worker(i, [stat_window(v), ScalarMean("reward", reward, 2)]))
    (merged,) = merger.on_train(train(1))
    by_key = {p.key: p for p in merged.points}
    every = np.concatenate(values)
    loss = by_key["loss"]
    assert loss.count == len(every) and loss.bucket_counts == stat_window(every).bucket_counts
    assert [math.isnan(x) for x in (loss.avg, loss.min, loss.max)] == [True] * 3
    assert math.isnan(by_key["reward"].value) and by_key["reward"].count == 4
    later = [np.array([0.5, -1.0]), np.array([3.0])]
    for i, v in enumerate(later):
        merger.add(
            Snapshot(
                (stat_window(v), ScalarMean("reward", 1.0 + i, 1)),
                None,
                worker(i, ()).resource,
                200 + i,
                "rollout",
            )
        )
    (merged,) = merger.on_train(train(2))
    by_key = {p.key: p for p in merged.points}
    every = np.concatenate(later)
    assert (by_key["loss"].avg, by_key["loss"].min, by_key["loss"].max) == pytest.approx(
        (every.mean(), every.min(), every.max())
    )
    assert by_key["reward"].value == 1.5


def test_a_retried_window_holding_a_nan_is_a_duplicate():
    merger = RolloutMerger()
    window = worker(0, [stat_window(np.array([1.0, np.nan])), ScalarMean("reward", 1.0, 1)])
    assert merger.add(window)
    retried = worker(0, [stat_window(np.array([1.0, np.nan])), ScalarMean("reward", 1.0, 1)])
    assert not merger.add(retried)  # decoded again: NaN objects that are not equal
    assert merger.duplicates == 1
    (merged,) = merger.on_train(train(1))
    assert {p.key: p for p in merged.points}["loss"].count == 2


def test_the_same_points_at_another_time_are_a_new_window_and_at_the_same_time_a_retry():
    merger = RolloutMerger()
    base = 1_700_000_000_000_000_000  # a real clock's nanoseconds: ints no cache shares

    def at(offset: int) -> Snapshot:
        points = (ScalarMean("r", 2.0, 1),)
        return Snapshot(points, None, worker(0, ()).resource, base + offset, "rollout")

    for offset in (0, 1):  # the next window, later, happens to hold the same points
        assert merger.add(at(offset))
    assert merger.add(at(-1))  # an earlier one, arriving late
    assert not merger.add(at(-1))  # its retry: an equal time
    assert merger.duplicates == 1
    (merged,) = merger.on_train(train(1))
    assert merged.flat(include_counts=True) == {"r": 2.0, "r__count": 3}


def test_a_workers_empty_stat_window_leaves_the_others_min_and_max():
    merger = RolloutMerger()
    merger.add(worker(0, [Histogram("len", 2, 3.0, 1.0, 2.0)]))
    merger.add(worker(1, [Histogram("len", 0, 0.0)]))  # saw no values: no min, no max
    merger.add(worker(2, [Histogram("len", 1, 0.5, 0.5, 0.5)]))
    (merged,) = merger.on_train(train(1))
    (point,) = merged.points
    assert (point.count, point.sum, point.min, point.max) == (3, 3.5, 0.5, 2.0)


def test_without_a_journal_a_checkpoint_does_nothing():
    merger = RolloutMerger()
    merger.add(worker(0, [ScalarMean("r", 1.0, 1)]))
    assert merger.on_train(train(1))
    merger.checkpoint()  # the collector calls it after every training snapshot
    merger.add(worker(0, [ScalarMean("r", 3.0, 1)]))
    assert merger.flush()
    merger.checkpoint(final=True)
    assert merger.journal is None and merger.step == Step(0, 1, 1)
