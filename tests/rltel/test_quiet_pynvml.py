"""pynvml's deprecation warning is hidden in the processes the demo starts, and only there."""

from __future__ import annotations

import os
import subprocess
import sys

from rltel.quiet_pynvml import PYNVML_DEPRECATION, hidden_in_children

WARN = (
    "import warnings; "
    f"warnings.warn({PYNVML_DEPRECATION + '. Please install nvidia-ml-py.'!r}, FutureWarning); "
    "warnings.warn('another FutureWarning', FutureWarning)"
)


def child_stderr() -> str:
    return subprocess.run(
        [sys.executable, "-c", WARN], capture_output=True, text=True, timeout=60
    ).stderr


def test_a_child_started_inside_hides_only_pynvml_and_the_environment_comes_back(monkeypatch):
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    assert PYNVML_DEPRECATION in child_stderr()
    with hidden_in_children():
        stderr = child_stderr()
    assert PYNVML_DEPRECATION not in stderr and "another FutureWarning" in stderr
    assert "PYTHONWARNINGS" not in os.environ


def test_the_users_own_filters_are_kept(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "error::DeprecationWarning")
    with hidden_in_children():
        assert os.environ["PYTHONWARNINGS"].split(",")[0] == "error::DeprecationWarning"
        with hidden_in_children():  # said once, however often
            assert os.environ["PYTHONWARNINGS"].count("pynvml") == 1
    assert os.environ["PYTHONWARNINGS"] == "error::DeprecationWarning"
