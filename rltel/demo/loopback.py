"""The demo ranks' process group, reachable from this host only.

``init_method="tcp://127.0.0.1:P"`` still makes rank 0 listen on every interface (torch's
TCPStore server binds ``*:P``), and gloo binds to the address the host name resolves to.
The demo instead meets in a file (``file://``: no store server at all) and binds gloo to the
loopback interface (``GLOO_SOCKET_IFNAME``), so every socket its ranks listen on is a
loopback bind.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch.distributed as dist

IFF_LOOPBACK = 0x8  # <net/if.h>


def rendezvous(scratch: Path) -> str:
    """A ``file://`` init method in ``scratch`` (a directory of this run's own)."""
    return (Path(scratch).resolve() / "rendezvous").as_uri()


def loopback_interface() -> str:
    """The name of this host's loopback network interface (``lo`` on Linux)."""
    for _, name in socket.if_nameindex():
        flags = Path("/sys/class/net", name, "flags")
        if flags.is_file() and int(flags.read_text(), 16) & IFF_LOOPBACK:
            return name
    return "lo0" if sys.platform == "darwin" else "lo"


def init_loopback_group(rank: int, world: int, init_method: str) -> None:
    """Join the gloo group at ``init_method`` (from :func:`rendezvous`), loopback only."""
    os.environ["GLOO_SOCKET_IFNAME"] = loopback_interface()
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
