"""scripts/system-deps: a no-op when the tools are there, one apt-get run as root, else one line.

Each case runs the real script under bash with PATH reduced to a folder of stand-ins: `id`
(who we are), `apt-get` (records its calls; "installs" by creating the tools) and the tools
that are present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "system-deps"
BASH = shutil.which("bash") or "/bin/bash"
TOOLS = (
    "prometheus", "promtool", "prometheus-alertmanager", "openssl", "node", "npm",
    "victoria-metrics",
)  # fmt: skip
PACKAGES = "prometheus prometheus-alertmanager openssl nodejs npm victoria-metrics"

FAKE_APT_GET = f"""#!{sys.executable}
import os, sys
from pathlib import Path
here = Path(sys.argv[0]).parent
with open(here / "apt-get.log", "a") as log:
    log.write(os.environ.get("DEBIAN_FRONTEND", "-") + " " + " ".join(sys.argv[1:]) + "\\n")
if sys.argv[1] == "install":
    for tool in os.environ.get("FAKE_INSTALLS", "").split():
        (here / tool).write_text("#!{BASH}\\nexit 0\\n")
        (here / tool).chmod(0o755)
"""


def stub(folder: Path, name: str, text: str = "") -> None:
    path = folder / name
    path.write_text(text or f"#!{BASH}\nexit 0\n")
    path.chmod(0o755)


def machine(tmp_path: Path, *, uid: int, apt_get: bool, present: tuple[str, ...]) -> Path:
    """A PATH folder: `id -u` prints ``uid``, optionally a recording apt-get, the tools."""
    folder = tmp_path / "bin"
    folder.mkdir()
    stub(folder, "id", f"#!{BASH}\necho {uid}\n")
    if apt_get:
        stub(folder, "apt-get", FAKE_APT_GET)
    for tool in present:
        stub(folder, tool)
    return folder


def run(path: str, *groups: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BASH, str(SCRIPT), *groups],
        env={"PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def apt_calls(folder: Path) -> list[str]:
    log = folder / "apt-get.log"
    return log.read_text().splitlines() if log.exists() else []


def assert_one_line_failure(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_nothing_missing_is_a_silent_no_op(tmp_path: Path):
    folder = machine(tmp_path, uid=0, apt_get=True, present=TOOLS)
    result = run(str(folder), "test")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert apt_calls(folder) == []


def test_not_root_says_in_one_line_what_to_install(tmp_path: Path):
    folder = machine(tmp_path, uid=1000, apt_get=True, present=())
    result = run(str(folder), "test")
    assert_one_line_failure(result, f"apt-get update && apt-get install -y {PACKAGES}")
    assert apt_calls(folder) == []


def test_without_apt_get_says_in_one_line_what_to_install(tmp_path: Path):
    folder = machine(tmp_path, uid=0, apt_get=False, present=("prometheus", "promtool"))
    result = run(str(folder), "test")
    assert_one_line_failure(result, "no apt-get", "prometheus-alertmanager openssl")
    assert "prometheus prometheus-alertmanager" not in result.stderr  # only what is missing


def test_root_installs_the_missing_packages_once_then_is_a_no_op(tmp_path: Path):
    folder = machine(tmp_path, uid=0, apt_get=True, present=("openssl", "node", "npm"))
    installs = "prometheus promtool prometheus-alertmanager victoria-metrics"
    result = run(str(folder), "test", FAKE_INSTALLS=installs)
    assert result.returncode == 0, result.stderr
    assert apt_calls(folder) == [
        "noninteractive update -qq",
        "noninteractive install -y -qq --no-install-recommends prometheus prometheus-alertmanager"
        " victoria-metrics",
    ]
    again = run(str(folder), "test", FAKE_INSTALLS=installs)
    assert (again.returncode, again.stderr) == (0, "")
    assert len(apt_calls(folder)) == 2


def test_a_package_that_does_not_provide_the_tool_fails_in_one_line(tmp_path: Path):
    present = tuple(tool for tool in TOOLS if tool != "openssl")
    folder = machine(tmp_path, uid=0, apt_get=True, present=present)
    result = run(str(folder), "test", FAKE_INSTALLS="")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith("still missing openssl; install them by hand")


def test_test_group_needs_node_and_npm(tmp_path: Path):
    """The Grafana schema check runs npm and node (Debian: npm is a package of its own)."""
    folder = machine(tmp_path, uid=1000, apt_get=True, present=TOOLS[:4])
    assert_one_line_failure(run(str(folder), "test"), "apt-get install -y nodejs npm")
    (tmp_path / "node").mkdir()
    folder = machine(tmp_path / "node", uid=1000, apt_get=True, present=TOOLS[:5])
    assert_one_line_failure(run(str(folder), "test"), "apt-get install -y npm")


def test_test_group_needs_victoria_metrics(tmp_path: Path):
    """The shared-store tests run Debian's single-node VictoriaMetrics."""
    folder = machine(tmp_path, uid=1000, apt_get=True, present=TOOLS[:6])
    assert_one_line_failure(run(str(folder), "test"), "apt-get install -y victoria-metrics")


def test_build_group_needs_make_and_python_venv(tmp_path: Path):
    folder = machine(tmp_path, uid=1000, apt_get=True, present=())
    stub(folder, "python3", f"#!{BASH}\nexit 1\n")  # a python without ensurepip
    result = run(str(folder), "build")
    assert_one_line_failure(result, "apt-get install -y make python3-venv")


def test_unknown_group_is_refused(tmp_path: Path):
    folder = machine(tmp_path, uid=0, apt_get=True, present=TOOLS)
    result = run(str(folder), "tset")
    assert result.returncode == 2
    assert "unknown group 'tset'" in result.stderr


def test_this_machine(tmp_path: Path):
    """The real tools on PATH; a stand-in `id` says non-root so that nothing gets installed."""
    folder = machine(tmp_path, uid=1000, apt_get=False, present=())
    result = run(f"{folder}{os.pathsep}{os.environ['PATH']}", "test")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        assert_one_line_failure(result, "openssl" if "openssl" in missing else "prometheus")
    else:
        assert (result.returncode, result.stderr) == (0, "")


def test_make_test_runs_the_check_before_anything_else():
    # Under `make test` itself (CI), the inherited MAKEFLAGS/MAKELEVEL would make this
    # nested make print "Entering directory" first.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "test"],
        cwd=SCRIPT.parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "bash scripts/system-deps test"
