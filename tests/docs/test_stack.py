"""docs/stack.md's native commands keep their promise: every port on loopback.

The Alertmanager command runs as written (paths and its web port swapped for the test's),
and every socket the process opens is read from /proc: listening TCP and bound UDP, with
their addresses.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
from pathlib import Path

from tests.dashboards.servers import _wait_ready, free_port

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "docs" / "stack.md"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
TCP_LISTEN = "0A"


def native_commands() -> list[str]:
    """The commands of the "Natively" block, continuation lines joined."""
    text = STACK.read_text().split("## Natively", 1)[1]
    block = re.search(r"^```bash\n(.*?)^```$", text, re.M | re.S).group(1)
    return [re.sub(r"\s+", " ", c) for c in block.replace("\\\n", " ").splitlines()]


def _address(hex_address: str) -> str:
    """``0100007F`` (IPv4) or 32 hex digits (IPv6), as /proc/net writes them, as text."""
    words = [int(hex_address[i : i + 8], 16) for i in range(0, len(hex_address), 8)]
    packed = b"".join(struct.pack("<I", word) for word in words)
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


def bound_sockets(pid: int) -> set[tuple[str, str, int]]:
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


def test_the_native_alertmanager_listens_only_on_its_loopback_web_port(tmp_path: Path):
    commands = native_commands()
    config = next(c for c in commands if c.startswith("sed 's/alert-webhook"))
    (command,) = [c for c in commands if c.startswith("prometheus-alertmanager ")]
    port = free_port()
    command = command.split(" # ")[0].rstrip().removesuffix("&")  # in the foreground
    script = "\n".join((config, f"exec {command}"))
    script = script.replace("/tmp/rltel-stack", str(tmp_path)).replace(
        "127.0.0.1:9093", f"127.0.0.1:{port}"
    )
    assert str(port) in script and str(tmp_path) in script
    log = (tmp_path / "alertmanager.log").open("wb")
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, stdout=log, stderr=log)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/-/ready", proc, tmp_path / "alertmanager.log")
        sockets = bound_sockets(proc.pid)  # exec: bash became Alertmanager
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
    assert ("tcp", "127.0.0.1", port) in sockets
    assert {address for _, address, _ in sockets} <= LOOPBACK, sockets
    assert {p for _, _, p in sockets} == {port}, sockets  # no cluster port (9094)
