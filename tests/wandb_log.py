"""Read back a W&B offline run with W&B's own CLI (``wandb leet inspect --json``)."""

from __future__ import annotations

import json
import subprocess
import sys


def inspect_wandb(path: str) -> list[dict]:
    """Every record of the ``.wandb`` transaction log at ``path``, decoded by W&B's CLI."""
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", path],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
