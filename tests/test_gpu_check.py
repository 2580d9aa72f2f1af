"""scripts/gpu-check on this machine: its report's form, its exit status and its JSON.

Without CUDA the checks with a CPU meaning run on the CPU and pass; the GPU-only ones skip,
saying why. With a GPU every check runs. Check 2 (the cost, ~10 s of timing on 2 cores) is
left to ``make gpu-check``, which CI runs in full after ``make test``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import torch

from bench.gpu_check import benchmarks_md

ROOT = Path(__file__).resolve().parents[1]
CHECKS = (1, 3, 4, 5, 6, 7, 8)
CPU_MEANING = {3, 4, 8}  # the checks that run and pass on a CPU


def test_gpu_check_reports_one_line_per_check_and_a_summary(tmp_path):
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        ["bash", "scripts/gpu-check", "--json", str(figures), "--only", *map(str, CHECKS)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    checks = [line for line in lines if re.match(r"(PASSED|FAILED|SKIPPED) +\d ", line)]
    assert [int(line.split()[1]) for line in checks] == list(CHECKS)
    report = json.loads(figures.read_text())
    status = {int(c["name"].split()[0]): c["status"] for c in report["checks"]}
    cuda = torch.cuda.is_available()
    want = {n: "passed" if cuda or n in CPU_MEANING else "skipped" for n in CHECKS}
    assert status == want, lines
    skipped = sum(s == "skipped" for s in want.values())
    assert lines[-1] == f"{len(CHECKS) - skipped} passed, 0 failed" + (
        f", {skipped} skipped" if skipped else ""
    )
    assert report["cuda"] is cuda and report["commit"]
    runs = next(c for c in report["checks"] if c["name"].startswith("4 "))["figures"]["runs"]
    assert all(run["collectives_per_export"] == 3 for run in runs if run["world"] == 2)


def test_the_benchmarks_section_is_written_from_the_result_files():
    doc = benchmarks_md.DOC.read_text()
    assert benchmarks_md.rendered(doc) == doc, "run python -m bench.gpu_check.benchmarks_md"
    gpu = (benchmarks_md.RESULTS / "gpu.json").exists()
    assert ("**GPU: not measured.**" in doc) is not gpu
    assert "**CPU (no CUDA" in doc  # the CPU run's figures, labelled CPU
