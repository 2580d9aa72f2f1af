"""docs/BENCHMARKS.md's GPU section, written from gpu-check's JSON files.

``results/gpu.json`` (a run on a lent GPU) and ``results/cpu.json`` (a run without CUDA)
become one section between two markers; the GPU part says "not measured" while there is no
GPU file. After a run on a GPU::

    scripts/gpu-check --json bench/gpu_check/results/gpu.json
    .venv/bin/python -m bench.gpu_check.benchmarks_md

``--check`` exits 1 when the section differs from what the files make (tests run it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
DOC = ROOT / "docs" / "BENCHMARKS.md"
BEGIN = "<!-- gpu-check: begin (python -m bench.gpu_check.benchmarks_md writes this) -->"
END = "<!-- gpu-check: end -->"
RUN = "scripts/gpu-check --json bench/gpu_check/results/{kind}.json"


def _table(report: dict) -> list[str]:
    lines = ["| check | status | result |", "|---|---|---|"]
    for check in report["checks"]:
        detail = check["detail"].replace("|", "\\|")
        lines.append(f"| {check['name']} | {check['status']} | {detail} |")
    return lines


def _heading(label: str, report: dict) -> str:
    return (f"**{label}: {report['device_name']}** ({report['device']}), torch "
            f"{report['torch']}, commit `{report['commit']}`, {report['date']}:")  # fmt: skip


def section(gpu: dict | None, cpu: dict | None) -> str:
    """The text between the markers, from the two reports (either may be missing)."""
    lines = [BEGIN, ""]
    if gpu is None:
        lines += [
            "**GPU: not measured.** No GPU has run `scripts/gpu-check` yet; the figures below",
            f"are the CPU run's, labelled CPU. On a lent GPU: `{RUN.format(kind='gpu')}`,",
            "then `python -m bench.gpu_check.benchmarks_md`.",
        ]
    else:
        lines += [_heading("GPU", gpu), "", *_table(gpu)]
    if cpu is not None:
        lines += ["", _heading("CPU (no CUDA; the checks with a CPU meaning)", cpu), "",
                  *_table(cpu)]  # fmt: skip
    return "\n".join([*lines, "", END])


def _load(kind: str) -> dict | None:
    path = RESULTS / f"{kind}.json"
    return json.loads(path.read_text()) if path.exists() else None


def rendered(doc: str) -> str:
    """``doc`` with its section replaced by what the result files make."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + section(_load("gpu"), _load("cpu")) + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the section is stale")
    args = parser.parse_args(argv)
    doc = DOC.read_text()
    new = rendered(doc)
    if args.check:
        return 0 if new == doc else 1
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
