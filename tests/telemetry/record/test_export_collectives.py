"""Collectives per export on 2 gloo ranks, counted by the process group itself.

The gloo group's sequence number goes up by one per collective it runs, whatever called it
(``gather_object`` is two: the sizes, then the bytes), so it counts independently of
``collectives_issued()``. In steady state (the same keys export after export) an export
makes 3: the key-set check, which also carries the samples' vote, SUM and MIN. The samples
are gathered (2 more) only at an export where a rank other than the first holds some, and
they still reach rank 0 then.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests.distributed import run_ranks

# per export: (ranks that log a sample before it, which one), the expected collectives
PLAN = (
    ((), 3),  # the first export: the keys agree at once (same keys on both ranks)
    ((), 3),
    ((1,), 5),  # rank 1 holds a sample: gathered
    ((), 3),
    ((0,), 3),  # only the first rank: its samples are where they are committed already
    ((0, 1), 5),
    ((), 3),
)


def _exports(rank: int, world: int) -> list:
    from telemetry import stats_tracker
    from telemetry.record.comm import collectives_issued
    from telemetry.samples import default_buffer, log_sample

    group = dist.group.WORLD
    out = []
    for step, (loggers, _) in enumerate(PLAN):
        mask = torch.ones(4, 8, dtype=torch.bool)
        with stats_tracker.scope("actor"):
            stats_tracker.denominator(n_valid_tokens=mask)
            stats_tracker.stat(
                loss=torch.full((4, 8), float(rank + step)), denominator="n_valid_tokens"
            )
            stats_tracker.scalar(lr=1e-6)
        if rank in loggers:
            log_sample("rollout", numbers={"reward": float(rank), "rank": rank, "step": step})
        dist.barrier()
        seq, issued = group._get_sequence_number_for_group(), collectives_issued()
        stats = stats_tracker.export_all(reduce_group=group)
        seq_used = group._get_sequence_number_for_group() - seq
        ranks = sorted(
            int(sample.number("rank"))
            for part in default_buffer().drain()
            for sample in part.samples
        )
        out.append((seq_used, collectives_issued() - issued, ranks, stats["actor/loss/avg"]))
    return out


def test_three_collectives_per_export_and_samples_gathered_only_when_a_rank_holds_some():
    results = run_ranks(_exports, 2, timeout=120)
    for step, (loggers, want) in enumerate(PLAN):
        for rank, result in enumerate(results):
            seq_used, issued, _, loss = result[step]
            assert seq_used == want, (step, rank, result[step])
            assert issued == want, (step, rank, result[step])  # collectives_issued agrees
            assert loss == step + 0.5  # the mean of rank 0's and rank 1's values
        # rank 0 commits every rank's samples; rank 1 keeps none after the export
        assert results[0][step][2] == sorted(loggers), step
        assert results[1][step][2] == [], step
