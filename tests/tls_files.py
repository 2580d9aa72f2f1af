"""Test TLS files made with the openssl CLI: a self-signed certificate for 127.0.0.1 and
localhost (its own CA: clients trust it as ``ca_file``) and its key."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def self_signed(folder: Path, name: str = "server") -> tuple[Path, Path]:
    """``(cert, key)``: PEM files in ``folder``, valid for a day."""
    cert, key = folder / f"{name}-cert.pem", folder / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
