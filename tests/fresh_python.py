"""Run a Python snippet in a fresh interpreter at the repository root: what a new process
imports, prints or leaves behind, unaffected by the test process's own imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_python(code: str, timeout: float = 60.0) -> str:
    """``code``'s stdout; fails the test, with its stderr, when it does not exit 0."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
