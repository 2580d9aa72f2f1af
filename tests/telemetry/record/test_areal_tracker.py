"""AReaL's stats_tracker surface, name for name and key for key (areal.utils.stats_tracker)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import torch

from telemetry import stats_tracker
from telemetry.model.errors import InvalidValueError
from telemetry.record.tracker import DistributedStatsTracker

# Every public name of AReaL's areal/utils/stats_tracker.py (module level).
AREAL_NAMES = (
    "DEFAULT_TRACKER",
    "TRACKERS",
    "LOCK",
    "MOE_AUX_LOSSES",
    "ReduceType",
    "DistributedStatsTracker",
    "get",
    "stat",
    "denominator",
    "export",
    "scope",
    "scalar",
    "record_timing",
    "scope_func_wrapper",
    "export_all",
)
AREAL_METHODS = (
    "scope",
    "scope_func_wrapper",
    "disable_scope",
    "record_timing",
    "denominator",
    "scalar",
    "stat",
    "export",
)


@pytest.fixture(autouse=True)
def clean_window():
    stats_tracker.export_all()
    yield
    stats_tracker.export_all()


def test_every_areal_name_exists():
    missing = [n for n in AREAL_NAMES if not hasattr(stats_tracker, n)]
    assert missing == []
    tracker = stats_tracker.get("x")
    assert [m for m in AREAL_METHODS if not callable(getattr(tracker, m, None))] == []
    assert stats_tracker.TRACKERS[""] is stats_tracker.DEFAULT_TRACKER
    assert stats_tracker.TRACKERS["x"] is tracker


def test_reduce_type_has_areal_names_and_is_the_models_enum():
    from telemetry.model.snapshot import StatReduce

    names = ["AVG_MIN_MAX", "AVG", "SUM", "MIN", "MAX", "SCALAR"]  # AReaL's, in its order
    assert [member.name for member in stats_tracker.ReduceType] == names
    assert stats_tracker.ReduceType is StatReduce  # one enum, defined once in the model


def test_areal_signatures_accept_areal_keywords():
    params = inspect.signature(stats_tracker.export_all).parameters
    assert list(params)[:3] == ["reduce_group", "key_sync_group", "reset"]
    params = inspect.signature(stats_tracker.DEFAULT_TRACKER.export).parameters
    assert list(params)[:4] == ["key", "reduce_group", "key_sync_group", "reset"]
    stats_tracker.scalar(lr=1.0, reduce_group=None)
    stats_tracker.denominator(valid=torch.ones(2, dtype=torch.bool), reduce_group=None)
    stats_tracker.stat(x=torch.ones(2), denominator="valid", reduce_group=None)
    assert set(stats_tracker.export_all(None, None, True)) == {
        "lr",
        "lr__count",
        "valid",
        "x/avg",
        "x/min",
        "x/max",
    }


def test_a_per_key_reduce_group_that_is_not_a_process_group_is_refused_by_name():
    with stats_tracker.scope("sft"):
        with pytest.raises(InvalidValueError, match="'sft/loss'.*process group"):
            stats_tracker.scalar(loss=1.0, reduce_group=object())
        with pytest.raises(InvalidValueError, match="'sft/valid'.*process group"):
            stats_tracker.denominator(valid=torch.ones(2, dtype=torch.bool), reduce_group="dp")
        stats_tracker.denominator(valid=torch.ones(2, dtype=torch.bool))
        with pytest.raises(InvalidValueError, match="'sft/x'.*process group"):
            stats_tracker.stat(x=torch.ones(2), denominator="valid", reduce_group=1)
    assert set(stats_tracker.export_all()) == {"sft/valid"}  # nothing else was recorded


def test_get_without_a_name_is_the_default_tracker():
    assert stats_tracker.get() is stats_tracker.DEFAULT_TRACKER
    stats_tracker.get().scalar(lr=0.1)
    assert stats_tracker.export_all()["lr"] == 0.1


def test_record_timing_is_timeperf_key_in_any_scope_and_any_tracker():
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        with stats_tracker.record_timing("train_step"):
            pass
        stats_tracker.scalar(grad_norm=1.0)  # the scope still applies after the timing
    with stats_tracker.get("rollout").record_timing("generate"):
        pass
    out = stats_tracker.export_all()
    spread = ("rank_min", "rank_max", "slowest_rank")  # rltel's straggler view of timings
    assert set(out) == {
        "timeperf/train_step",
        "timeperf/train_step__count",
        "timeperf/generate",
        "timeperf/generate__count",
        "ppo_actor/update/grad_norm",
        "ppo_actor/update/grad_norm__count",
        *(f"timeperf/{name}/{s}" for name in ("train_step", "generate") for s in spread),
    }
    timing = next(p for p in out.points if p.key == "timeperf/train_step")
    assert timing.unit == "s"


def test_scope_func_wrapper_scopes_sync_and_async_functions():
    @stats_tracker.scope_func_wrapper("ppo_actor")
    def train(x):
        """Docstring kept."""
        stats_tracker.scalar(loss=x)
        return x * 2

    @stats_tracker.get("rollout").scope_func_wrapper("workflow")
    async def rollout():
        """Coroutine docstring kept."""
        await asyncio.sleep(0)
        stats_tracker.get("rollout").scalar(reward=0.5)

    assert train(3.0) == 6.0 and train.__doc__ == "Docstring kept."
    assert rollout.__name__ == "rollout" and rollout.__doc__ == "Coroutine docstring kept."
    asyncio.run(rollout())
    stats_tracker.scalar(outside=1.0)
    out = stats_tracker.export_all()
    assert {k for k in out if not k.endswith("__count")} == {
        "ppo_actor/loss",
        "rollout/workflow/reward",
        "outside",
    }


def test_disable_scope_records_bare_keys_like_areal():
    tracker = DistributedStatsTracker("rollout")
    with tracker.scope("a"), tracker.disable_scope():
        tracker.scalar(bare=1.0)
        with tracker.scope("inner"):
            tracker.scalar(nested=2.0)
    with tracker.scope("a"):
        tracker.scalar(after=3.0)  # the scope stack is back
    keys = {k for k in tracker.export() if not k.endswith("__count")}
    # AReaL clears the whole scope stack, which holds the tracker name too.
    assert keys == {"bare", "inner/nested", "rollout/a/after"}


def test_disable_scope_is_restored_after_an_exception():
    with stats_tracker.scope("s"):
        with pytest.raises(RuntimeError), stats_tracker.disable_scope():
            raise RuntimeError
        stats_tracker.scalar(x=1.0)
    assert "s/x" in stats_tracker.export_all()


def test_scope_names_are_stripped_of_slashes():
    with stats_tracker.scope("/ppo_actor/"):
        stats_tracker.scalar(x=1.0)
    assert "ppo_actor/x" in stats_tracker.export_all()
