"""AReaL's rollout call sites against rltel: workflows record per episode into the rollout
tracker, each inference engine exports rank-locally when the controller asks it (by RPC, one
process at a time), and the RolloutController merges the workers count-weighted.

The workers are 2 gloo ranks, as AReaL's engines live in processes that have a process
group: that is where an ``export_all(reduce_group=None)`` that reduced over the world
returned the world's mean, or blocked while the other worker was not exporting.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from collector.merge import RolloutMerger
from telemetry.model.snapshot import Snapshot, Step
from tests.conformance import loader
from tests.conformance.cases import close
from tests.conformance.cases_tracker import areal_module, rltel_module
from tests.distributed import run_ranks

ENGINE = "engine/sglang_remote.py"
CONTROLLER = "infra/controller/rollout_controller.py"


def _episodes(st: ModuleType, worker: int) -> None:
    """A workflow's per-episode records (areal/workflow/multi_turn.py and rlvr.py:
    ``stats_tracker.get(workflow_context.stat_scope()).scalar(reward=..., num_turns=...)``;
    ``stat_scope()`` is "rollout", or "eval-rollout" in eval mode)."""
    for episode in range(2 + worker):
        st.get("rollout").scalar(reward=0.25 * episode + worker, num_turns=1 + episode % 2)
    if worker == 0:
        st.get("eval-rollout").scalar(reward=0.5)


def _engine_export(st: ModuleType) -> dict:
    """AReaL's ``RemoteSGLangEngine.export_stats``, its own code, on tracker ``st``."""
    export_stats = loader.method(
        ENGINE, "RemoteSGLangEngine", "export_stats", {"stats_tracker": st}
    )
    return dict(export_stats(SimpleNamespace()))


def _worker(rank: int, world: int) -> dict[str, Any]:
    """Record episodes through both trackers; the workers export one after the other."""
    import torch.distributed as dist

    exports: dict[str, Any] = {}
    for side, make in (("areal", areal_module), ("rltel", rltel_module)):
        st = make()
        _episodes(st, rank)
        for turn in range(world):  # the controller's RPCs reach one worker at a time
            if turn == rank:
                exports[side] = _engine_export(st)
            dist.barrier()
    return exports


@pytest.fixture(scope="module")
def worker_exports() -> list[dict[str, Any]]:
    return run_ranks(_worker, 2, timeout=180)


def _controller_merge(raw_stats: list[dict]) -> dict:
    """AReaL's ``RolloutController.export_stats``, its own code, over the workers' exports."""
    from collections import defaultdict

    export_stats = loader.method(
        CONTROLLER, "RolloutController", "export_stats", {"defaultdict": defaultdict}
    )
    controller = SimpleNamespace(_collective_rpc=lambda method, http_timeout: raw_stats)
    return export_stats(controller)


def test_each_engine_exports_its_own_values_without_waiting_for_the_others(worker_exports):
    for rank, exports in enumerate(worker_exports):
        assert close(exports["rltel"], exports["areal"], rel=1e-6)  # AReaL divides in float32
        episodes = [0.25 * e + rank for e in range(2 + rank)]
        assert exports["rltel"]["rollout/reward"] == pytest.approx(sum(episodes) / len(episodes))
        assert exports["rltel"]["rollout/reward__count"] == len(episodes)
        assert type(exports["rltel"]["rollout/reward__count"]) is int


def test_the_controller_merges_rltel_exports_as_it_merges_areals(worker_exports):
    areal = _controller_merge([e["areal"] for e in worker_exports])
    rltel = _controller_merge([e["rltel"] for e in worker_exports])
    assert (
        rltel.keys()
        == areal.keys()
        == {
            "rollout/reward",
            "rollout/num_turns",
            "eval-rollout/reward",
        }
    )
    for key, value in areal.items():
        assert rltel[key] == pytest.approx(value, rel=1e-6), key
    rewards = [0.25 * e + w for w in range(2) for e in range(2 + w)]
    assert rltel["rollout/reward"] == pytest.approx(sum(rewards) / len(rewards))


def test_the_collector_merge_equals_the_controllers(worker_exports):
    """rltel's collector applies the RolloutController rule to the workers' streams."""
    from telemetry.record.stats import points_from_flat

    merger = RolloutMerger()
    run = (("rltel.experiment", "e"), ("rltel.trial", "t"))
    for worker, exports in enumerate(worker_exports):
        by_stream: dict[str, dict] = {}
        for key, value in exports["rltel"].items():
            by_stream.setdefault(key.partition("/")[0], {})[key] = value
        for stream, flat in by_stream.items():
            resource = (*run, ("rltel.role", stream), ("rltel.worker_id", f"w{worker}"))
            merger.add(Snapshot(tuple(points_from_flat(flat)), None, resource, 1, stream))
    merged = merger.on_train(Snapshot((), Step(0, 1, 1), (*run, ("rltel.rank", 0)), 2))
    flat = {key: value for snapshot in merged for key, value in snapshot.flat().items()}
    controller = _controller_merge([e["areal"] for e in worker_exports])
    assert flat.keys() == controller.keys()
    for key, value in controller.items():
        assert flat[key] == pytest.approx(value, rel=1e-6), key
