"""Score a cosmic-ray session: killed mutants over the non-equivalent ones, and the rest.

Usage: python scripts/mutation_report.py SESSION.sqlite [SOURCE_ROOT]

Mutants inside type annotations are counted as equivalent: every module here starts with
``from __future__ import annotations``, so annotations are never evaluated. Every other
survivor is listed with its line, to be killed by a test or judged by hand.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every annotation in ``source``."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations = []
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations.append(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            annotations.append(node.returns)
        for ann in annotations:
            spans.append(((ann.lineno, ann.col_offset), (ann.end_lineno, ann.end_col_offset)))
    return spans


def main(session: str, root: str = ".") -> int:
    dump = subprocess.run(
        [str(Path(sys.executable).with_name("cosmic-ray")), "dump", session],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    killed = equivalent = 0
    survivors = []
    spans: dict[str, list] = {}
    for line in dump.splitlines():
        item, result = json.loads(line)
        if not result:
            continue
        mutation = item["mutations"][0]
        path = mutation["module_path"]
        if path not in spans:
            spans[path] = annotation_spans((Path(root) / path).read_text())
        start = tuple(mutation["start_pos"])
        if any(a <= start < b for a, b in spans[path]):
            equivalent += 1
        elif result.get("test_outcome") == "survived":
            survivors.append((path, start[0], mutation["operator_name"].split("/")[-1]))
        else:
            killed += 1
    scored = killed + len(survivors)
    score = 100.0 * killed / scored if scored else 100.0
    print(
        f"killed {killed} of {scored} non-equivalent mutants ({score:.1f} %); "
        f"{equivalent} in annotations (equivalent)"
    )
    for path, line_no, operator in sorted(survivors):
        text = (Path(root) / path).read_text().splitlines()[line_no - 1].strip()
        print(f"  survived {path}:{line_no} {operator}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
