"""Samples logged on every rank reach the committing rank: one object gather per export.

Trainers commit on one rank (the group's first, as AReaL logs from rank 0), but a rollout
workflow may log samples on any rank. At each export over a data-parallel group
(``stats_tracker.export_all(reduce_group=...)``, which every rank of the group calls),
every rank hands what its buffer kept since the last export to the group's first rank in
one ``gather_object``; that rank merges the parts into its own step under the same bounds
(:meth:`~telemetry.samples.buffer.SampleBuffer.absorb`). A rank sends at most its bound
per stream (``reservoir + 2 * extremes`` samples of at most ``max_text_bytes`` a field),
and the first rank keeps at most one bound per stream whatever the world size.

Every rank of the group gathers, whatever it logged or its ``samples`` config says (a
rank without a StatsLogger has the default config): the collective never depends on
state one rank alone holds, so it cannot hang.
"""

from __future__ import annotations

import torch.distributed as dist

from telemetry.samples.buffer import SampleBuffer


def gather_to_first(group: dist.ProcessGroup | None, buffer: SampleBuffer) -> None:
    """Move what ``buffer`` kept on each rank of ``group`` into the first rank's buffer.

    Call on every rank of ``group``; ``None`` (rank-local) or a group of one rank does
    nothing.
    """
    if group is None or not dist.is_available() or not dist.is_initialized():
        return
    world = dist.get_world_size(group)
    if world <= 1:
        return
    own = buffer.drain()
    first = dist.get_rank(group) == 0
    parts: list[object] | None = [None] * world if first else None
    dist.gather_object(own, parts, dst=dist.get_global_rank(group, 0), group=group)
    if parts is not None:
        buffer.absorb([part for drained in parts for part in drained])
