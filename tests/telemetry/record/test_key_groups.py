"""AReaL's per-key ``reduce_group`` (its main branch): keys recorded with a group of their
own are reduced over it (or over ``key_sync_group``), the others over the export's group.

The layout is AReaL's context-parallel one on 2 gloo ranks: each rank is its own
data-parallel group, both ranks together are the DP+CP group that CP-local loss stats
must be reduced over.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from telemetry.record.reduce import collectives_issued
from tests.distributed import run_ranks

LOSS = {0: [1.0, 2.0, 4.0], 1: [8.0]}  # each rank's valid loss tokens


def _record(tracker, rank: int, cp_dp_group, with_override: bool = True) -> None:
    values = torch.tensor(LOSS[rank] + [100.0])  # the last token is padding
    mask = torch.tensor([True] * len(LOSS[rank]) + [False])
    if with_override:
        tracker.denominator(n_valid_tokens=mask, reduce_group=cp_dp_group)
        tracker.stat(loss=values, denominator="n_valid_tokens", reduce_group=cp_dp_group)
        tracker.scalar(grad_norm=float(rank + 1), reduce_group=cp_dp_group)
    tracker.denominator(n_seqs=torch.ones(rank + 1, dtype=torch.bool))


def _groups(rank: int, world: int):
    singles = [dist.new_group([r]) for r in range(world)]  # every rank creates every group
    return singles[rank], dist.group.WORLD


def _with_key_sync_group(rank: int, world: int) -> dict:
    from telemetry.stats_tracker import DistributedStatsTracker

    dp_group, cp_dp_group = _groups(rank, world)
    tracker = DistributedStatsTracker()
    _record(tracker, rank, cp_dp_group)
    return dict(tracker.export(reduce_group=dp_group, key_sync_group=cp_dp_group))


def _override_on_one_rank_only(rank: int, world: int) -> dict:
    from telemetry.stats_tracker import DistributedStatsTracker

    dp_group, cp_dp_group = _groups(rank, world)
    tracker = DistributedStatsTracker()
    _record(tracker, rank, cp_dp_group, with_override=rank == 0)
    before = collectives_issued()
    out = dict(tracker.export(reduce_group=dp_group, key_sync_group=cp_dp_group))
    out["collectives"] = collectives_issued() - before
    return out


def _without_key_sync_group(rank: int, world: int) -> dict:
    from telemetry.stats_tracker import DistributedStatsTracker

    _, cp_dp_group = _groups(rank, world)
    tracker = DistributedStatsTracker()
    _record(tracker, rank, cp_dp_group)
    return dict(tracker.export(reduce_group=None))  # the overrides still reduce over theirs


def _pooled() -> dict[str, float]:
    tokens = LOSS[0] + LOSS[1]
    return {
        "n_valid_tokens": float(len(tokens)),
        "loss/avg": sum(tokens) / len(tokens),
        "loss/min": min(tokens),
        "loss/max": max(tokens),
        "grad_norm": 1.5,
        "grad_norm__count": 2,
    }


@pytest.mark.parametrize("sequence", [_with_key_sync_group, _without_key_sync_group])
def test_override_keys_reduce_over_their_group_and_the_rest_over_the_export_group(sequence):
    for rank, out in enumerate(run_ranks(sequence, 2)):
        expected = {**_pooled(), "n_seqs": float(rank + 1)}  # n_seqs stays rank-local
        assert out.keys() == expected.keys()
        for key, value in expected.items():
            assert out[key] == pytest.approx(value, rel=1e-12), key
        assert type(out["grad_norm__count"]) is int


def test_a_rank_without_override_keys_still_joins_the_key_sync_group():
    rank0, rank1 = run_ranks(_override_on_one_rank_only, 2)
    tokens = LOSS[0]
    assert rank0["loss/avg"] == rank1["loss/avg"] == pytest.approx(sum(tokens) / len(tokens))
    assert rank0["grad_norm"] == rank1["grad_norm"] == 1.0
    assert (rank0["n_seqs"], rank1["n_seqs"]) == (1.0, 2.0)
    # the DP groups have one rank (no collective); the key sync group: header + payload
    assert rank0["collectives"] == rank1["collectives"] > 0
