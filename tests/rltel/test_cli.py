"""`rltel` command line: one-line errors (exit 2, no rank started) and the help output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RLTEL = Path(sys.executable).with_name("rltel")
BAD_DEMO_ARGS = {
    "steps 0": (["--steps", "0"], "--steps", "0"),
    "steps negative": (["--steps", "-1"], "--steps", "-1"),
    "steps not a number": (["--steps", "many"], "--steps", "many"),
    "ranks 0": (["--ranks", "0"], "--ranks", "0"),
    "ranks negative": (["--ranks=-2"], "--ranks", "-2"),
    "port too large": (["--prometheus-port", "70000"], "--prometheus-port", "70000"),
    "port negative": (["--prometheus-port", "-1"], "--prometheus-port", "-1"),
    "serve seconds negative": (["--serve-seconds", "-5"], "--serve-seconds", "-5"),
}


def rltel(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed ``rltel`` entry point with a fixed terminal width."""
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [str(RLTEL), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rltel demo: error: argument ")
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", list(BAD_DEMO_ARGS))
def test_bad_demo_argument_is_one_line_exit_2_before_any_rank(case: str, tmp_path: Path):
    args, option, value = BAD_DEMO_ARGS[case]
    fileroot = tmp_path / "runs"
    result = rltel("demo", *args, "--fileroot", str(fileroot))
    assert_one_line_error(result, option, repr(value))
    assert not fileroot.exists()  # no rank ran (rank 0 creates the run directory)


def test_busy_prometheus_port_is_one_line_exit_2(tmp_path: Path):
    fileroot = tmp_path / "runs"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        result = rltel("demo", "--prometheus-port", port, "--fileroot", str(fileroot))
    assert_one_line_error(result, "--prometheus-port", port, "in use")
    assert not fileroot.exists()


def test_module_entry_point_reports_the_same_way(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "rltel.cli", "demo", "--ranks", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert_one_line_error(result, "--ranks", "'0'")


def test_rltel_help_lists_each_command_on_one_line():
    result = rltel("--help")
    assert result.returncode == 0, result.stderr
    for command in ("demo", "collector", "report"):
        (line,) = [x for x in result.stdout.splitlines() if x.split()[:1] == [command]]
        assert len(line.split()) > 3, line  # the command's summary is on its own line


def test_rltel_without_or_with_an_unknown_command_is_one_line_exit_2():
    for args in ((), ("nonsense",)):
        result = rltel(*args)
        assert result.returncode == 2
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("rltel: error: ")


def test_demo_help_shows_every_option_with_help_and_default():
    result = rltel("demo", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # undo the wrapping
    for option, default in (
        ("--ranks RANKS", "2"),
        ("--steps STEPS", "12"),
        ("--fileroot FILEROOT", "runs"),
        ("--prometheus-port PROMETHEUS_PORT", "9464"),
        ("--serve-seconds SERVE_SECONDS", "0.0"),
        ("--collector", "False"),
        ("--otlp-endpoint HOST:PORT", "None"),
        ("--rollout-workers N", "2"),
        ("--verbose", "False"),
    ):
        after = text.split("options:", 1)[1].split(option, 1)[1]
        help_text = after.split(" --", 1)[0]  # up to the next option
        assert f"(default: {default})" in help_text, (option, help_text)
        assert len(help_text.split()) > 3, (option, help_text)


def test_collector_help_reaches_the_collectors_own_parser():
    result = rltel("collector", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rltel collector")
    assert "--print-config" in result.stdout
