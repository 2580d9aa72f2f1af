"""Issue 41's delivery benches, the tree before it against this checkout, back to back.

A detached ``git worktree`` of the old commit (default ``ce7237e``, the last commit before
issue 41's first change) is the old tree; this checkout, uncommitted changes included, is
the new one. For each bench (record, commit/export, collector, Prometheus) each tree runs
its own copy of the script in a fresh process, cwd and ``PYTHONPATH`` that tree, alternately
(old, new, old, new, ...) for ``--rounds`` rounds, so load drift hits both alike. The
figures are parsed from each script's text, which both trees print alike. One markdown table
follows: the median of each side, new/old, and each side's spread (min and max across
rounds over its median); a figure whose new/old lies outside both spreads is flagged.

About 2 minutes a round on 2 idle cores (3 rounds: 7 minutes). Run one at a time: a
worktree left by a killed run (``rltel-compare-old-*`` in the temp folder) is removed.

    python bench/compare_trees.py [--old ce7237e] [--rounds 3] [--only record ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = "ce7237e"
WORKTREE_PREFIX = "rltel-compare-old-"
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"


def column(row: str, index: int) -> str:
    """A pattern for the ``index``-th number after a table row's label."""
    return rf"^{re.escape(row)}\s+(?:\S+\s+){{{index}}}{NUMBER}"


@dataclass(frozen=True)
class Bench:
    """One bench script and its figures: (name, pattern whose first group is the number)."""

    name: str
    script: str
    figures: tuple[tuple[str, str], ...]


ONE, TWO = "1 rank", "2 gloo ranks (rank 0)"
BENCHES = (
    Bench(
        "record",
        "bench/record_bench.py",
        (
            ("1 rank: record ms", column(ONE, 0)),
            ("1 rank: export ms", column(ONE, 1)),
            ("1 rank: x.sum ms (baseline)", column(ONE, 2)),
            ("1 rank: cpu ratio", column(ONE, 4)),
            ("2 ranks: record ms", column(TWO, 0)),
            ("2 ranks: export ms", column(TWO, 1)),
            ("2 ranks: cpu ratio", column(TWO, 4)),
            ("bytes held before export", column(ONE, 5)),
            ("collectives per export, 2 ranks", column(TWO, 7)),
            ("first step, fresh process ms", rf"fresh process, empty inductor cache:\s+{NUMBER}"),
            ("heartbeat on/off, cpu", rf"on/off wall \S+, cpu {NUMBER}x"),
            ("one heartbeat beat, cpu us", rf"read back\): {NUMBER} us"),
        ),
    ),
    Bench(
        "export",
        "bench/export_bench.py",
        (
            ("5000 gauges encode ms", rf"^5000 gauges\s+encode\s+{NUMBER} ms"),
            ("5000 gauges encode+export ms", rf"^5000 gauges .*encode\+export\s+{NUMBER} ms"),
            ("5000 histograms encode ms", rf"^5000 histograms .*?encode\s+{NUMBER} ms"),
            ("5000 histograms encode+export ms", rf"^5000 histograms .*encode\+export\s+{NUMBER}"),
            ("5000 gauges serialise ms (baseline)", rf"^5000 gauges .*serialise\s+{NUMBER} ms"),
            ("commit p50 ms, collector up", rf"^commit, collector up\s+p50 {NUMBER}"),
            ("commit p99 ms, collector up", rf"^commit, collector up\s+.*p99 {NUMBER}"),
            ("commit p50 ms, collector down", rf"^commit, collector down\s+p50 {NUMBER}"),
            ("commit p99 ms, collector down", rf"^commit, collector down\s+.*p99 {NUMBER}"),
            ("write-ahead p50 ms", rf"^write-ahead per step \(.*?\) p50 {NUMBER} ms"),
        ),
    ),
    Bench(
        "collector",
        "bench/collector_bench.py",
        (
            ("parse points/s (baseline)", rf"^parse \(protobuf only, baseline\)\s+{NUMBER}"),
            ("parse + decode points/s", rf"^parse \+ decode to Snapshots\s+{NUMBER}"),
            ("+ Prometheus sink points/s", rf"^parse \+ decode \+ Prometheus sink\s+{NUMBER}"),
            ("+ all sinks points/s", rf"^parse \+ decode \+ all sinks \(.*\)\s+{NUMBER}"),
            ("Export -> /metrics p50 ms", rf"visible on /metrics\s+p50 {NUMBER} ms"),
            ("Export -> /metrics p99 ms", rf"visible on /metrics\s+.*p99 {NUMBER} ms"),
        ),
    ),
    Bench(
        "prometheus",
        "bench/prometheus_bench.py",
        (
            ("export ms", rf"^export \(fold in\)\s+{NUMBER} ms"),
            ("render text ms", rf"^render text\s+{NUMBER} ms"),
            ("render OpenMetrics ms", rf"^render OpenMetrics\s+{NUMBER} ms"),
            ("export + render text ms", rf"^export \+ render text\s+{NUMBER} ms"),
            ("HTTP scrape ms", rf"^HTTP scrape \(text\)\s+{NUMBER} ms"),
            ("generate_latest ms (baseline)", rf"^baseline generate_latest .*\)\s+{NUMBER} ms"),
        ),
    ),
)


def parse(bench: Bench, output: str) -> dict[str, float]:
    """Each of ``bench``'s figures in one run's ``output``.

    Raises:
        ValueError: a figure is not in the output (the script's text changed).
    """
    figures = {}
    for name, pattern in bench.figures:
        found = re.search(pattern, output, re.MULTILINE)
        if found is None:
            raise ValueError(f"{bench.name}: no {name!r} in the output ({pattern!r})")
        figures[name] = float(found.group(1).replace(",", ""))
    return figures


@dataclass(frozen=True)
class Side:
    """One tree's rounds of a figure: the median, and min and max over the median."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Side:
        median = statistics.median(values)
        return cls(median, min(values) / median, max(values) / median)

    def holds(self, ratio: float) -> bool:
        return self.low <= ratio <= self.high


@dataclass(frozen=True)
class Row:
    bench: str
    figure: str
    old: Side
    new: Side

    @property
    def ratio(self) -> float:
        return self.new.median / self.old.median

    @property
    def flagged(self) -> bool:
        """new/old outside both sides' run-to-run spread."""
        return not self.old.holds(self.ratio) and not self.new.holds(self.ratio)


def rows(bench: Bench, old: list[dict[str, float]], new: list[dict[str, float]]) -> list[Row]:
    """One row per figure from each tree's parsed rounds."""
    return [
        Row(bench.name, name, Side.of([r[name] for r in old]), Side.of([r[name] for r in new]))
        for name, _ in bench.figures
    ]


def number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 100 else f"{value:.3g}"


def spread(side: Side) -> str:
    return f"{side.low:.2f}-{side.high:.2f}"


def table(all_rows: list[Row]) -> str:
    lines = [
        "| bench | figure | old median | new median | new/old | old spread | new spread | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in all_rows:
        flag = "**outside both spreads**" if row.flagged else ""
        lines.append(
            f"| {row.bench} | {row.figure} | {number(row.old.median)} | "
            f"{number(row.new.median)} | {row.ratio:.3f} | {spread(row.old)} | "
            f"{spread(row.new)} | {flag} |"
        )
    return "\n".join(lines)


def git(*args: str, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=check)
    return done.stdout.strip()


def remove_stale_worktrees() -> None:
    """Remove the worktrees a killed run left, then prune the ones whose folder is gone."""
    temp = Path(tempfile.gettempdir()).resolve()
    for line in git("worktree", "list", "--porcelain").splitlines():
        path = Path(line.removeprefix("worktree "))
        if path.parent == temp and path.name.startswith(WORKTREE_PREFIX):
            print(f"removing a stale worktree {path}", file=sys.stderr)
            git("worktree", "remove", "--force", str(path), check=False)
    git("worktree", "prune")


@contextlib.contextmanager
def old_tree(rev: str) -> Iterator[Path]:
    """A detached worktree of ``rev`` in the temp folder, removed on leaving."""
    remove_stale_worktrees()
    path = Path(tempfile.mkdtemp(prefix=WORKTREE_PREFIX)).resolve()
    try:
        git("worktree", "add", "--quiet", "--detach", str(path), rev)
        yield path
    finally:
        git("worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
        git("worktree", "prune")


def environment(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_imports(tree: Path) -> None:
    """Raise unless rltel's packages import from ``tree`` (not the editable install's)."""
    code = "import collector, exporters, rltel, telemetry as t; print(t.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env=environment(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    if not Path(done.stdout.strip()).is_relative_to(tree):
        raise RuntimeError(f"telemetry imported from {done.stdout.strip()}, not from {tree}")


def run(tree: Path, bench: Bench) -> str:
    """One run of ``tree``'s copy of ``bench``'s script: its standard output."""
    done = subprocess.run(
        [sys.executable, bench.script],
        cwd=tree,
        env=environment(tree),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{bench.script} in {tree} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def compare(old: Path, new: Path, benches: list[Bench], rounds: int) -> list[Row]:
    """Each bench's old and new runs, alternating, ``rounds`` times; their rows."""
    result = []
    for bench in benches:
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for i in range(rounds):
            for side, tree in (("old", old), ("new", new)):
                start = time.perf_counter()
                runs[side].append(parse(bench, run(tree, bench)))
                took = time.perf_counter() - start
                print(f"{bench.name} {side} {i + 1}/{rounds}: {took:.1f} s", file=sys.stderr)
        result += rows(bench, runs["old"], runs["new"])
    return result


def describe(rev: str) -> str:
    changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    dirty = f" + uncommitted changes in {len(changed)} files" if changed else ""
    old, new = (git("rev-parse", "--short", r) for r in (rev, "HEAD"))
    return f"old {old}, new {new}{dirty}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default=OLD, help=f"the old tree's commit (default {OLD})")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree per bench")
    parser.add_argument("--only", nargs="+", choices=[b.name for b in BENCHES])
    args = parser.parse_args()
    benches = [b for b in BENCHES if args.only is None or b.name in args.only]
    with old_tree(args.old) as old:
        for tree in (old, ROOT):
            check_imports(tree)
        print(f"{describe(args.old)}; {args.rounds} rounds, old then new; {sys.executable}")
        print(table(compare(old, ROOT, benches, args.rounds)))


if __name__ == "__main__":
    main()
