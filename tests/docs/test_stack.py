"""docs/stack.md's native commands keep their promise: every port on loopback.

The Alertmanager command runs as written (paths and its web port swapped for the test's),
and every socket the process opens is read from /proc: listening TCP and bound UDP, with
their addresses.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.dashboards.servers import _wait_ready, free_port
from tests.proc_sockets import bound_sockets

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "docs" / "stack.md"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def native_commands() -> list[str]:
    """The commands of the "Natively" block, continuation lines joined."""
    text = STACK.read_text().split("## Natively", 1)[1]
    block = re.search(r"^```bash\n(.*?)^```$", text, re.M | re.S).group(1)
    return [re.sub(r"\s+", " ", c) for c in block.replace("\\\n", " ").splitlines()]


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
