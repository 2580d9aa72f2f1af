"""`rltel` without an optional library: one line naming the extra, exit 2, no traceback.

Each test runs the installed entry point in a subprocess whose ``sitecustomize`` marks the
named libraries as not installed (``sys.modules[name] = None``: importing them raises
ModuleNotFoundError and ``importlib.util.find_spec`` finds nothing, as for a library that
was never installed). The spawned demo ranks inherit it through ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import tomllib

from rltel.cli import DEMO_LIBRARIES
from rltel.report.cli import LIBRARIES as REPORT_LIBRARIES
from telemetry.config.cli_args import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
RLTEL = Path(sys.executable).with_name("rltel")
SITECUSTOMIZE = """\
import os
import sys

for name in os.environ["RLTEL_TEST_UNINSTALLED"].split(","):
    sys.modules[name] = None
"""


def rltel_without(libraries: list[str], *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``rltel ARGS`` in ``tmp_path`` as if ``libraries`` were not installed."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "RLTEL_TEST_UNINSTALLED": ",".join(libraries)}
    return subprocess.run(
        [str(RLTEL), *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )


def one_line(result: subprocess.CompletedProcess, prefix: str) -> str:
    """The single stderr line of a failed command (exit 2, nothing on stdout)."""
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_the_shim_makes_a_library_look_uninstalled(tmp_path: Path):
    result = rltel_without(["swanlab"], "collector", "--print-config", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr  # the shim itself breaks nothing
    code = "import importlib.util as u; print(u.find_spec('swanlab')); import swanlab"
    shim = tmp_path / "shim"
    env = {**os.environ, "PYTHONPATH": str(shim), "RLTEL_TEST_UNINSTALLED": "swanlab"}
    probe = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert probe.stdout == "None\n"
    assert "ModuleNotFoundError" in probe.stderr


def test_demo_without_swanlab_names_the_extra_before_starting_a_rank(tmp_path: Path):
    fileroot = tmp_path / "runs"
    result = rltel_without(
        ["swanlab"], "demo", "--fileroot", str(fileroot), "--prometheus-port", "0",
        tmp_path=tmp_path,
    )  # fmt: skip
    line = one_line(result, "rltel demo: error: swanlab not installed: ")
    assert "pip install rltel[swanlab]" in line
    assert "rltel[all]" in line
    assert not fileroot.exists()  # no rank ran (rank 0 creates the run directory)


def test_demo_names_every_missing_sink_library_in_one_line(tmp_path: Path):
    fileroot = tmp_path / "runs"
    result = rltel_without(
        ["wandb", "swanlab", "tensorboard", "trackio"], "demo", "--collector", "--fileroot",
        str(fileroot), tmp_path=tmp_path,
    )  # fmt: skip
    prefix = "rltel demo: error: wandb, swanlab, tensorboard, trackio not installed: "
    line = one_line(result, prefix)
    assert "pip install rltel[swanlab,tensorboard,trackio,wandb]" in line
    assert not fileroot.exists()


def test_demo_sending_to_the_users_collector_needs_no_sink_library(tmp_path: Path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{sock.getsockname()[1]}"
    result = rltel_without(
        ["wandb", "swanlab", "tensorboard"], "demo", "--otlp-endpoint", endpoint,
        tmp_path=tmp_path,
    )  # fmt: skip
    line = one_line(result, "rltel demo: error: argument --otlp-endpoint: no collector")
    assert "not installed" not in line  # got past the library check to the endpoint's


def test_report_without_matplotlib_names_the_extra(tmp_path: Path):
    result = rltel_without(["matplotlib"], "report", str(tmp_path), tmp_path=tmp_path)
    line = one_line(result, "rltel report: error: matplotlib not installed: ")
    assert line.endswith("pip install rltel[report]")
    assert not (tmp_path / "report").exists()


def test_any_command_whose_import_fails_prints_one_line(tmp_path: Path):
    result = rltel_without(["yaml"], "collector", "--print-config", tmp_path=tmp_path)
    line = one_line(result, "rltel collector: error: ")
    assert "'yaml'" in line and "reinstall rltel" in line


def extra_libraries(extras: Iterable[str]) -> set[str]:
    """The distributions pyproject.toml's ``extras`` install (``rltel[...]`` expanded)."""
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names: set[str] = set()
    for extra in extras:
        for requirement in optional[extra]:
            nested = re.fullmatch(r"rltel\[([a-z,]+)\]", requirement)
            if nested:
                names |= extra_libraries(nested.group(1).split(","))
            else:
                names.add(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower())
    return names


def test_the_readme_install_line_installs_what_the_demo_and_the_report_import():
    readme = (ROOT / "README.md").read_text()
    (extras,) = re.findall(r'^pip install -e "\.\[([a-z,]+)\]"', readme, re.M)
    assert {*DEMO_LIBRARIES, *REPORT_LIBRARIES} <= extra_libraries(extras.split(","))


def test_each_library_is_named_with_the_extra_that_installs_it():
    for library, extra in EXTRAS.items():
        assert library in extra_libraries([extra]), (library, extra)
