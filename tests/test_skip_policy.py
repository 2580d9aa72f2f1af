"""With RLTEL_NO_SKIPS=1 (make test, CI) only the accelerator skips are allowed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.parametrize(
    ("reason", "strict", "code"),
    [
        ("needs a CUDA device", "1", 0),
        ("needs the openssl CLI", "1", 1),
        ("needs the openssl CLI", "", 0),
    ],
)
def test_only_accelerator_skips_pass_in_strict_mode(tmp_path, reason, strict, code):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_runs():\n    pass\n"
        f"@pytest.mark.skipif(True, reason={reason!r})\n"
        "def test_skipped():\n    pass\n"
    )
    env = {**os.environ, "RLTEL_NO_SKIPS": strict}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == code, done.stdout + done.stderr
    assert ("not allowed" in done.stdout) == (code == 1)


def test_a_module_skipped_at_collection_counts(tmp_path):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text("def test_runs():\n    pass\n")
    (tmp_path / "test_y.py").write_text(
        "import pytest\npytest.importorskip('no_such_module_rltel')\ndef test_y():\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "RLTEL_NO_SKIPS": "1"},
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no_such_module_rltel" in done.stdout
