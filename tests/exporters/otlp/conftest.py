"""Fixtures of the OTLP delivery tests."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 2 MiB tmpfs, so that a spool on it meets ENOSPC (mounting needs root or
    CAP_SYS_ADMIN; the test is skipped, saying why, without them)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a 2 MiB tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
