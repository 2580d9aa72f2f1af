"""``rltel report RUN_DIR [RUN_DIR ...]``: figures and an HTML page from runs' event files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from telemetry.config.cli_args import OneLineParser, install_line, missing_libraries

PROG = "rltel report"
LIBRARIES = ("matplotlib", "tensorboard")
"""What the report imports: the figures' canvas and the event-file reader (``rltel[report]``)."""


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description=(
            "Read runs' TensorBoard event files and write PNG figures (with the plotted data "
            "as JSON) and one self-contained index.html. Several runs are overlaid. A run "
            "with a trace (the collector's trace.json, or the per-rank trace files) also gets "
            "timeline.png: its last steps, or --since/--until, a row per rank and worker."
        ),
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="a trial directory FILEROOT/EXPERIMENT/TRIAL"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="output directory (default: RUN_DIR/report; required with several runs)",
    )
    parser.add_argument("--since", type=int, metavar="STEP", help="first step drawn (inclusive)")
    parser.add_argument("--until", type=int, metavar="STEP", help="last step drawn (inclusive)")
    parser.add_argument(
        "--keys",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only tags matching this glob, e.g. 'ppo_actor/*' (repeatable; default: all)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the report; bad input prints one line on stderr and returns 2."""
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.since is not None and args.until is not None and args.since > args.until:
        parser.error(f"--since {args.since} is after --until {args.until}")
    if args.out is None and len(args.runs) > 1:
        parser.error("give --out DIR when reporting several runs")
    missing = missing_libraries(LIBRARIES)
    if missing:
        print(f"{PROG}: error: {install_line(missing)}", file=sys.stderr)
        return 2
    from rltel.report.build import build_report
    from rltel.report.runs import Filters, ReportInputError, load_runs

    out = Path(args.out) if args.out is not None else Path(args.runs[0]) / "report"
    filters = Filters(args.since, args.until, tuple(args.keys))
    try:
        runs = load_runs(args.runs, filters, exclude=out)
        index = build_report(runs, out, filters)
    except ReportInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(f"{PROG}: wrote {index}")
    return 0
