"""The project's docker-compose.yml driven through the `docker compose` CLI, as a user runs it.

`scripts/stack-test` starts the engine and sets DOCKER_HOST, DOCKER_CONFIG (the Compose
plugin) and RLTEL_STACK_FILES (the compose files, ``:``-separated: the project's file and
the stand-ins override). Nothing here talks to the engine but the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILES = "docker-compose.yml:dashboards/compose/stand-ins.yml"


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    """``docker ARGS`` in the repository root; its stdout."""
    done = subprocess.run(
        ["docker", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def compose(*args: str, timeout: float = 600, check: bool = True) -> str:
    """``docker compose -f FILE... ARGS``: the project's compose files, as the test runs them."""
    files = os.environ.get("RLTEL_STACK_FILES", DEFAULT_FILES).split(":")
    options = [part for name in files for part in ("-f", name)]
    return docker("compose", *options, *args, timeout=timeout, check=check)


def containers() -> dict[str, dict]:
    """Service name -> the container's `docker inspect` record (running or stopped)."""
    ids = compose("ps", "--all", "--quiet").split()
    if not ids:
        return {}
    records = json.loads(docker("inspect", *ids))
    return {r["Config"]["Labels"]["com.docker.compose.service"]: r for r in records}


def volume_path(volume: str) -> Path:
    """Where the named volume's files lie on this machine (the engine's data root)."""
    project = json.loads(compose("config", "--format", "json"))["name"]
    return Path(
        docker("volume", "inspect", "--format", "{{.Mountpoint}}", f"{project}_{volume}").strip()
    )


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> object:
    """Poll ``condition`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.5)
