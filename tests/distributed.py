"""Run a function on N gloo (or NCCL) ranks in spawned processes, with a hard timeout."""

from __future__ import annotations

import os
import pickle
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _entry(
    rank: int, world: int, port: int, fn: Callable, args: tuple, queue, backend: str
) -> None:
    import torch
    import torch.distributed as dist

    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        if backend == "nccl":  # one GPU per rank
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )
        try:
            result = fn(rank, world, *args)
            queue.put((rank, "ok", result))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # reported to the parent, which fails the test
        queue.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_ranks(
    fn: Callable[..., Any], world: int, *args: Any, timeout: float = 60.0, backend: str = "gloo"
) -> list:
    """Call ``fn(rank, world, *args)`` on ``world`` ranks of ``backend`` (gloo, or nccl with
    one GPU per rank); return results by rank.

    ``fn`` must be a module-level function (it is pickled). A rank that raises makes this
    raise ``AssertionError`` with every rank's traceback; a hang is killed after ``timeout``.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(r, world, port, fn, args, queue, backend), daemon=True)
        for r in range(world)
    ]
    for proc in procs:
        proc.start()
    results: dict[int, tuple[str, Any]] = {}
    try:
        for _ in range(world):
            rank, status, value = queue.get(timeout=timeout)
            results[rank] = (status, value)
    except Exception as exc:
        raise AssertionError(f"ranks timed out after {timeout}s; got {sorted(results)}") from exc
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
    errors = [f"rank {r}: {v}" for r, (s, v) in sorted(results.items()) if s == "error"]
    if errors:
        raise AssertionError("\n".join(errors))
    return [results[r][1] for r in range(world)]


class Counted:
    """Wraps the torch.distributed calls a reduction may make in this process; records
    ``(call, bytes handed back)`` per call (for the tests and bench/reduce_bench.py)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        for name in ("all_reduce", "all_gather", "all_gather_object", "gather", "broadcast"):
            setattr(dist, name, self._wrap(name, getattr(dist, name)))

    def _wrap(self, name, call):
        def counted(*args, **kwargs):
            done = call(*args, **kwargs)
            first = args[0]
            if name == "all_gather_object":
                size = sum(len(pickle.dumps(o)) for o in first)
            elif isinstance(first, list):
                size = sum(t.numel() * t.element_size() for t in first)
            elif name == "gather":  # the received list, on the destination only
                out = args[1] if len(args) > 1 else kwargs.get("gather_list")
                size = sum(t.numel() * t.element_size() for t in out or [])
            else:
                size = first.numel() * first.element_size()
            self.calls.append((name, size))
            return done

        return counted

    def take(self) -> list[tuple[str, int]]:
        calls, self.calls = self.calls, []
        return calls
