"""A producer's call is one unit, and a key has one writer per window
(telemetry/record/produce.py)."""

from __future__ import annotations

import logging

import pytest
import torch

from telemetry.model.errors import InvalidValueError, UnknownDenominatorError
from telemetry.record.tracker import DistributedStatsTracker, ReduceType

MASK = torch.tensor([True, True, False, True])
X = torch.tensor([1.0, 2.0, 50.0, 4.0])


def test_a_producer_call_that_raises_leaves_nothing() -> None:
    tracker = DistributedStatsTracker()
    with pytest.raises(UnknownDenominatorError), tracker.producing("p"):
        tracker.denominator(n=MASK)
        tracker.stat(x=X, denominator="missing")
    assert tracker.export() == {}


def test_producer_calls_pool_like_direct_calls() -> None:
    """Two staged calls (a stat with buckets, a scalar) export what direct calls export."""
    direct, staged = DistributedStatsTracker(), DistributedStatsTracker()
    for tracker in (direct, staged):
        tracker.set_bucket_bounds("x", [1.5, 3.0])
    for mask, value in ((MASK, X), (~MASK, X * 2)):
        direct.denominator(n=mask)
        direct.stat(x=value, denominator="n")
        direct.scalar(s=float(value.sum()))
        with staged.producing("p"):
            staged.denominator(n=mask)
            staged.stat(x=value, denominator="n")
            staged.scalar(s=torch.tensor(float(value.sum())))
    expected, got = direct.export(), staged.export()
    assert got == expected
    assert got["x/avg"] == pytest.approx((1 + 2 + 4 + 100) / 4)
    assert got.points == expected.points  # the histogram's bucket counts too
    (histogram,) = [p for p in got.points if p.metric == "x"]
    assert list(histogram.bucket_counts) == [1, 1, 2]


def test_a_producer_refuses_keys_another_caller_recorded(caplog) -> None:
    tracker = DistributedStatsTracker()
    tracker.denominator(n=MASK)
    with caplog.at_level(logging.WARNING, logger="telemetry.record.produce"):
        for _ in range(2):
            with tracker.producing("p"):
                tracker.denominator(n=MASK, m=MASK)
                tracker.stat(x=X, denominator="m", reduce_type=ReduceType.SUM)
    assert tracker.export() == {"n": 3.0}
    assert tracker.refusals.counts == {"p": 2}
    assert [r.getMessage() for r in caplog.records] == [
        "p: 'n' was recorded by another caller in this export; p records nothing until the "
        "next export (two writers of one key would sum into one wrong value)"
    ]


@pytest.mark.parametrize(
    ("call", "kept"),
    [
        (lambda t: t.scalar(x=5.0), {"x": 5.0, "x__count": 1}),  # the user's own x
        (lambda t: t.denominator(n=~MASK), {"n": 1.0}),  # the user's own mask n
    ],
)
def test_another_callers_call_takes_a_producers_keys_back(caplog, call, kept) -> None:
    tracker = DistributedStatsTracker()
    with tracker.producing("p"):
        tracker.denominator(n=MASK)
        tracker.stat(x=X, y=X, denominator="n")
    with caplog.at_level(logging.WARNING, logger="telemetry.record.produce"):
        call(tracker)  # p's x, y and n leave the window
    assert dict(tracker.export()) == kept
    assert tracker.refusals.counts == {"p": 1}
    (key,) = kept.keys() - {"x__count"}
    assert len(caplog.records) == 1 and f"'{key}'" in caplog.records[0].getMessage()


def test_ownership_ends_with_the_export_that_takes_the_key() -> None:
    tracker = DistributedStatsTracker()
    with tracker.scope("a"), tracker.producing("p"):
        tracker.denominator(n=MASK)
    with tracker.scope("b"), tracker.producing("p"):
        tracker.denominator(n=MASK)
    assert tracker.export(key="a") == {"a/n": 3.0}
    with tracker.scope("a"):
        tracker.denominator(n=MASK)  # a plain call on a key p no longer owns
    assert tracker.export() == {"a/n": 3.0, "b/n": 3.0}
    assert not tracker.refusals.counts


def test_a_call_on_another_tracker_inside_a_producer_call_records_at_once() -> None:
    """Only the tracker a producer call is for records into its window, whichever of two
    trackers it is."""
    first, second = DistributedStatsTracker(), DistributedStatsTracker()
    for producer, other in ((first, second), (second, first)):
        with producer.producing("p"):
            producer.scalar(mine=1.0)
            other.scalar(theirs=2.0)
            assert dict(other.export()) == {"theirs": 2.0, "theirs__count": 1}
            assert dict(producer.export()) == {}  # its call is not joined yet
        assert dict(producer.export()) == {"mine": 1.0, "mine__count": 1}


def test_owners_are_told_apart_by_name() -> None:
    """A producer named at run time (an equal name, another string object) is the same
    owner: its calls pool and a plain call takes all of its keys back; the keys of other
    producers, named before and after it, stay."""
    tracker = DistributedStatsTracker()
    for key in ("n", "m"):
        with tracker.producing("".join(["pro", "ducer"])):
            tracker.denominator(**{key: MASK})
    with tracker.producing("a"):
        tracker.denominator(a=MASK)
    with tracker.producing("z"):
        tracker.denominator(z=MASK)
    with tracker.producing("".join(["pro", "ducer"])):
        tracker.denominator(n=MASK)  # the same owner: pooled, not refused
    assert not tracker.refusals.counts
    tracker.scalar(n=1.0)  # takes back every key of "producer", n and m
    assert dict(tracker.export()) == {"n": 1.0, "n__count": 1, "a": 3.0, "z": 3.0}
    assert tracker.refusals.counts == {"producer": 1}


def test_a_producer_that_records_its_own_stat_with_another_reduce_type_is_refused() -> None:
    tracker = DistributedStatsTracker()
    with tracker.producing("p"):
        tracker.denominator(n=MASK)
        tracker.stat(x=X, denominator="n")
    with (
        pytest.raises(InvalidValueError, match="'x': recorded with reduce type avg_min_max"),
        tracker.producing("p"),
    ):
        tracker.denominator(n=MASK)
        tracker.stat(x=X, denominator="n", reduce_type=ReduceType.SUM)
    assert tracker.export()["x/avg"] == pytest.approx(7 / 3)  # the first call's only
