"""The demo's ranks listen on loopback only (issue 23, item 6): their process group meets
in a file (no TCPStore server on ``*:PORT``) and gloo binds to the loopback interface."""

from __future__ import annotations

import ipaddress
import os
import socket
import traceback

import torch.multiprocessing as mp

from rltel.demo.loopback import init_loopback_group, loopback_interface, rendezvous
from tests.proc_sockets import listening

TIMEOUT_S = 120.0


def _rank(rank: int, world: int, init_method: str, queue) -> None:
    import torch
    import torch.distributed as dist

    try:
        init_loopback_group(rank, world, init_method)
        total = torch.ones(1)
        dist.all_reduce(total)  # every pair of ranks connected
        queue.put((rank, "ok", (float(total), listening())))
        dist.barrier()  # no rank leaves before every rank has looked
        dist.destroy_process_group()
    except BaseException as exc:  # reported to the test, which fails
        queue.put((rank, "error", f"{exc!r}\n{traceback.format_exc()}"))


def test_the_demo_ranks_listen_on_loopback_only(tmp_path):
    ctx = mp.get_context("spawn")
    queue, world = ctx.Queue(), 2
    init_method = rendezvous(tmp_path)
    assert init_method.startswith("file://")
    procs = [ctx.Process(target=_rank, args=(r, world, init_method, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    try:
        results = dict((r, (s, v)) for r, s, v in (queue.get(timeout=TIMEOUT_S) for _ in procs))
    finally:
        for proc in procs:
            proc.join(TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
    assert all(status == "ok" for status, _ in results.values()), results
    for rank, (_, (total, binds)) in results.items():
        assert total == world
        assert binds, f"rank {rank} listens on nothing: gloo's pair sockets were not seen"
        assert all(ipaddress.ip_address(a).is_loopback for a, _ in binds), (rank, binds)


def test_a_wildcard_bind_is_seen_as_such():
    """The check above can fail: a socket on every interface is reported with its address."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert ("0.0.0.0", port) in listening(os.getpid())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert ("127.0.0.1", sock.getsockname()[1]) in listening()


def test_the_loopback_interface_is_named():
    assert socket.if_nametoindex(loopback_interface()) > 0
