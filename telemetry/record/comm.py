"""The group a reduction spans, and every ``torch.distributed`` call it makes, counted.

``group=None`` (or no initialised process group) is rank-local, as in AReaL: world size 1,
and every call below returns its input without a collective. On an NCCL group the tensors
live on the current CUDA device; on any other backend on the CPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["Comm", "collectives_issued"]

_collectives_issued = 0


def collectives_issued() -> int:
    """How many collectives this process has issued for reductions and the samples'
    gather (for benchmarks)."""
    return _collectives_issued


def _count(n: int) -> None:
    global _collectives_issued
    _collectives_issued += n


class Comm:
    """One reduction's view of its group: world size, own rank, device, and the calls."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        if group is None or not dist.is_available() or not dist.is_initialized():
            self.world, self.rank, self.device = 1, 0, torch.device("cpu")
            return
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")

    @property
    def key(self) -> int:
        """Identifies the group for per-group caches (the same on every rank of it)."""
        return id(self.group)

    def all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
        """``tensor`` reduced over the group with ``op``, in place; empty tensors skip."""
        if self.world > 1 and tensor.numel():
            dist.all_reduce(tensor, op=op, group=self.group)
            _count(1)
        return tensor

    def all_gather_object(self, obj: object) -> list[object]:
        """Every rank's ``obj``, by rank (two collectives inside ``torch.distributed``)."""
        if self.world == 1:
            return [obj]
        out: list[object] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        _count(2)
        return out

    def gather_object_to_first(self, obj: object) -> list[object] | None:
        """Every rank's ``obj``, by rank, on the group's first rank only; ``None`` on the
        others (two collectives inside ``torch.distributed``: the sizes, then the bytes)."""
        if self.world == 1:
            return [obj]
        out: list[object] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=dist.get_global_rank(self.group, 0), group=self.group)
        _count(2)
        return out

    def gather_to_first(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """Every rank's ``tensor`` stacked ``[world, ...]`` on the group's first rank only
        (the committing rank); ``None`` on the others."""
        if self.world == 1:
            return tensor[None]
        first = dist.get_global_rank(self.group, 0)
        parts = [torch.empty_like(tensor) for _ in range(self.world)] if self.rank == 0 else None
        dist.gather(tensor, parts, dst=first, group=self.group)
        _count(1)
        return torch.stack(parts) if parts is not None else None
