"""Samples logged on other ranks reach the committing rank: one object gather, when needed.

Trainers commit on one rank (the group's first, as AReaL logs from rank 0), but a rollout
workflow may log samples on any rank. At each export over a data-parallel group
(``stats_tracker.export_all(reduce_group=...)``, which every rank of the group calls),
each rank votes in the reduction's key-set check (:func:`wants_gather`: it is not the first
rank and its buffer holds something); when any rank voted yes, every rank hands what its
buffer kept since the last export to the group's first rank in one ``gather_object``, and
that rank merges the parts into its own step under the same bounds
(:meth:`~telemetry.samples.buffer.SampleBuffer.absorb`). A rank sends at most its bound
per stream (``reservoir + 2 * extremes`` samples of at most ``max_text_bytes`` a field),
and the first rank keeps at most one bound per stream whatever the world size. An export
where no rank but the first holds samples makes no gather: the reduction's 3 collectives.

Every rank of the group takes the same decision from the same all-reduced vote, whatever
it logged or its ``samples`` config says: the gather never depends on state one rank alone
holds, so it cannot hang.
"""

from __future__ import annotations

import torch.distributed as dist

from telemetry.record.comm import Comm
from telemetry.samples.buffer import SampleBuffer

__all__ = ["gather_to_first", "wants_gather"]


def wants_gather(group: dist.ProcessGroup | None, buffer: SampleBuffer) -> bool:
    """This rank's vote: it is not the first rank of ``group`` and ``buffer`` holds samples
    (the first rank's own samples are already where they are committed)."""
    comm = Comm(group)
    return comm.world > 1 and comm.rank != 0 and buffer.pending()


def gather_to_first(group: dist.ProcessGroup | None, buffer: SampleBuffer) -> None:
    """Move what ``buffer`` kept on each rank of ``group`` into the first rank's buffer.

    Call on every rank of ``group`` (when the vote of :func:`wants_gather` carried);
    ``None`` (rank-local) or a group of one rank does nothing.
    """
    comm = Comm(group)
    if comm.world == 1:
        return
    parts = comm.gather_object_to_first(buffer.drain())
    if parts is not None:
        buffer.absorb([part for drained in parts for part in drained])
