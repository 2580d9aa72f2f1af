"""A reduction's view of its group (telemetry/record/comm.py): rank-local without a group,
and each call's result and collective count on 2 gloo ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist

from telemetry.record.comm import Comm, collectives_issued
from tests.distributed import run_ranks


def test_without_a_group_every_call_is_rank_local():
    comm = Comm(None)
    before = collectives_issued()
    assert (comm.world, comm.rank, comm.device) == (1, 0, torch.device("cpu"))
    tensor = torch.tensor([1.0, 2.0])
    assert comm.all_reduce(tensor, dist.ReduceOp.SUM) is tensor
    assert tensor.tolist() == [1.0, 2.0]
    assert comm.all_gather_object({"a": 1}) == [{"a": 1}]
    assert comm.gather_object_to_first("x") == ["x"]
    assert comm.gather_to_first(tensor).tolist() == [[1.0, 2.0]]
    assert collectives_issued() == before


def _calls(rank: int, world: int) -> dict:
    fresh = collectives_issued()  # a new process has issued none
    local = Comm(None)  # rank-local, though a world is initialised
    comm = Comm(dist.group.WORLD)
    before = collectives_issued()
    summed = comm.all_reduce(torch.tensor([rank + 1.0]), dist.ReduceOp.SUM)
    empty = comm.all_reduce(torch.empty(0), dist.ReduceOp.SUM)  # skipped: no collective
    return {
        "fresh": fresh,
        "local": (local.world, local.rank, local.all_gather_object(rank)),
        "world, rank": (comm.world, comm.rank),
        "key": comm.key == id(dist.group.WORLD),
        "summed": summed.tolist(),
        "empty": empty.numel(),
        "all": comm.all_gather_object({"rank": rank}),
        "first": comm.gather_object_to_first(f"r{rank}"),
        "stacked": _listed(comm.gather_to_first(torch.tensor([rank, 10.0 + rank]))),
        "issued": collectives_issued() - before,
    }


def _listed(tensor: torch.Tensor | None) -> list | None:
    return None if tensor is None else tensor.tolist()


def test_on_two_ranks_each_call_reaches_the_group_and_is_counted():
    first, second = run_ranks(_calls, 2)
    for rank, out in enumerate((first, second)):
        assert out["fresh"] == 0 and out["local"] == (1, 0, [rank])
        assert out["world, rank"] == (2, rank) and out["key"]
        assert out["summed"] == [3.0] and out["empty"] == 0
        assert out["all"] == [{"rank": 0}, {"rank": 1}]
        assert out["issued"] == 1 + 2 + 2 + 1  # gather_object is two collectives
    assert first["first"] == ["r0", "r1"] and second["first"] is None
    assert first["stacked"] == [[0.0, 10.0], [1.0, 11.0]] and second["stacked"] is None


def _after_teardown(rank: int, world: int, store: str) -> tuple:
    group = dist.group.WORLD
    dist.destroy_process_group()
    comm = Comm(group)  # a group kept from a world torn down since
    out = (comm.world, comm.rank, comm.all_gather_object("x"))
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    return out  # (a world again, for run_ranks to tear down)


def test_a_group_of_a_torn_down_world_is_rank_local(tmp_path):
    (out,) = run_ranks(_after_teardown, 1, str(tmp_path / "store"))
    assert out == (1, 0, ["x"])
