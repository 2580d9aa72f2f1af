"""The sockets a process has bound, read from ``/proc``: its fds give the sockets' inodes,
``/proc/<pid>/net/{tcp,tcp6,udp,udp6}`` their addresses and states."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

TCP_LISTEN = "0A"  # the st column of /proc/net/tcp


def _address(hex_address: str) -> str:
    """``0100007F`` (IPv4) or 32 hex digits (IPv6), as /proc/net writes them, as text."""
    words = [int(hex_address[i : i + 8], 16) for i in range(0, len(hex_address), 8)]
    packed = b"".join(struct.pack("<I", word) for word in words)
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


def bound_sockets(pid: int | str = "self") -> set[tuple[str, str, int]]:
    """``(protocol, address, port)`` of every listening TCP and bound UDP socket of ``pid``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the process closed it meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode in inodes and (table.startswith("udp") or state == TCP_LISTEN):
                address, port = local.split(":")
                found.add((table.rstrip("6"), _address(address), int(port, 16)))
    return found


def listening(pid: int | str = "self") -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on (IPv4 and IPv6)."""
    return sorted((address, port) for proto, address, port in bound_sockets(pid) if proto == "tcp")
