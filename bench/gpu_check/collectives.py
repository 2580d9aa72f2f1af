"""Check 4: the DP reduction of CUDA tensors, its collectives and bytes, on real ranks.

Each rank records the same keys (a masked token stat and a scalar) from its own seeds on
its device and exports ``EXPORTS`` times over the whole group. The collectives are counted
by the process group itself (its sequence number: one per collective, whatever issued it)
and by ``collectives_issued()``; the bytes per rank as ``bench/reduce_bench.py`` counts
them (``tests.distributed.Counted``). The values must be the same bits on every rank and
equal a float64 reduction of every rank's inputs made here.
"""

from __future__ import annotations

import struct

import numpy as np
import torch
import torch.distributed as dist

from bench.gpu_check.outcome import Context
from tests.distributed import run_ranks

__all__ = ["reduction"]

EXPORTS = 4
STEADY = 3  # collectives per export once the key set is agreed (the same keys each time)


def inputs(rank: int, export: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One rank's token values, mask and scalar at one export (CPU, from seeds)."""
    gen = torch.Generator().manual_seed(1000 * rank + export)
    return torch.randn(8, 512, generator=gen), torch.rand(8, 512, generator=gen) < 0.7, rank + 0.5


def _rank(rank: int, world: int, device: str) -> list[dict]:
    from telemetry.record.comm import collectives_issued
    from telemetry.record.export import export_sources
    from telemetry.record.tracker import DistributedStatsTracker
    from tests.distributed import Counted

    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    group, counted = dist.group.WORLD, Counted()
    tracker = DistributedStatsTracker("gpu_check")
    out = []
    for export in range(EXPORTS):
        x, mask, scalar = inputs(rank, export)
        tracker.denominator(n=mask.to(device))
        tracker.stat(denominator="n", x=x.to(device))
        tracker.scalar(s=torch.tensor(scalar).to(device))
        dist.barrier()
        counted.take()
        seq, issued = group._get_sequence_number_for_group(), collectives_issued()
        stats = export_sources([tracker], reduce_group=group)
        out.append({
            "stats": dict(stats),
            "collectives": group._get_sequence_number_for_group() - seq,
            "issued": collectives_issued() - issued,
            "bytes": sum(size for _, size in counted.take()),
        })  # fmt: skip
    return out


def reference(world: int, export: int) -> dict[str, float]:
    """float64 numpy over every rank's inputs: the keys ``_rank`` exports."""
    parts = [inputs(rank, export) for rank in range(world)]
    values = np.concatenate([x.double().numpy()[m.numpy()] for x, m, _ in parts])
    return {"gpu_check/n": float(values.size), "gpu_check/x/avg": values.sum() / values.size,
            "gpu_check/x/min": values.min(), "gpu_check/x/max": values.max(),
            "gpu_check/s": float(np.mean([s for _, _, s in parts]))}  # fmt: skip


def _bits(stats: dict[str, float]) -> dict[str, bytes]:
    return {key: struct.pack("<d", value) for key, value in stats.items()}


def _run(backend: str, world: int, device: str) -> dict:
    """One setup: every rank's exports checked; its figures."""
    results = run_ranks(_rank, world, device, timeout=120, backend=backend)
    for export in range(EXPORTS):
        first = results[0][export]
        for rank, result in enumerate(results[1:], 1):
            assert _bits(result[export]["stats"]) == _bits(first["stats"]), (backend, rank)
        for key, want in reference(world, export).items():
            got = first["stats"][key]
            assert abs(got - want) <= 1e-12 * abs(want), (backend, export, key, got, want)
    steady = STEADY if world > 1 else 0
    for rank, result in enumerate(results):
        counts = [(e["collectives"], e["issued"]) for e in result]
        assert all(c == (steady, steady) for c in counts), (backend, world, rank, counts)
    return {"backend": backend, "world": world, "device": device,
            "collectives_per_export": steady,
            "bytes_per_rank_per_export": max(e["bytes"] for r in results for e in r)}  # fmt: skip


def reduction(ctx: Context) -> tuple[str, dict]:
    """Check 4: NCCL (world 1; 2 ranks where 2 GPUs are visible) and gloo with CUDA tensors
    on 2 ranks sharing the GPU; on the CPU, gloo on 2 ranks."""
    if not ctx.cuda:
        setups = [("gloo", 2, "cpu")]
    else:
        setups = [("nccl", 1, "cuda"), ("gloo", 2, "cuda")]
        if ctx.gpus >= 2:
            setups.append(("nccl", 2, "cuda"))
    runs = [_run(*setup) for setup in setups]
    names = ", ".join(
        f"{r['backend']} x{r['world']} on {r['device']}: {r['collectives_per_export']} "
        f"collectives, {r['bytes_per_rank_per_export']} B/rank"
        for r in runs
    )
    return f"same bits on every rank, = float64 reference; {names} per export", {"runs": runs}
