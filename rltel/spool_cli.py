"""``rltel spool flush DIR --endpoint HOST:PORT``: send spools left on disk to a collector.

A trainer whose collector was down spools to ``<fileroot>/<experiment>/<trial>/otlp-spool/``
(``otlp.spool_dir``); a later process with the same config replays it, and this command does
so without one. Exit status: 0 when everything was delivered (one line on stdout), 1 when
something is left on disk or was refused (one line on stderr), 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from telemetry.config import load_experiment
from telemetry.config.cli_args import OneLineParser, seconds
from telemetry.model.errors import ConfigError

PROG = "rltel spool"


def parser() -> argparse.ArgumentParser:
    """``rltel spool`` and its one subcommand, ``flush``."""
    spool = OneLineParser(prog=PROG, description="Work with OTLP spools left on disk.")
    commands = spool.add_subparsers(title="commands", dest="command", required=True)
    flush = commands.add_parser(
        "flush",
        help="send spooled requests to a collector, oldest first, and delete them",
        description=(
            "Send the requests spooled under DIR (a sender's spool, or a run's otlp-spool/ "
            "with one spool per sender) to an OTLP/gRPC endpoint, in order, deleting each "
            "once delivered. Run it only on a spool whose process has ended."
        ),
    )
    flush.add_argument("directory", metavar="DIR", help="a spool directory, or otlp-spool/")
    flush.add_argument("--endpoint", required=True, help="HOST:PORT of the OTLP/gRPC receiver")
    flush.add_argument(
        "--timeout",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="give up retrying after this long; what is left stays on disk (default 30)",
    )
    flush.add_argument(
        "--config",
        metavar="YAML",
        help="a stats_logger config whose otlp section gives TLS files and headers",
    )
    return spool


def main(argv: list[str] | None = None) -> int:
    """Run ``rltel spool ...``; returns the exit status."""
    from exporters.otlp.flush import flush_spools

    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    name = f"{PROG} {args.command}"
    try:
        config, _ = load_experiment(args.config or {})
        otlp = dataclasses.replace(config.otlp, endpoint=args.endpoint)
    except (ConfigError, ValueError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    # The outcome is the one line below; the sender's own warnings would repeat it.
    logging.getLogger("exporters.otlp").setLevel(logging.CRITICAL)
    try:
        report = flush_spools(args.directory, otlp, timeout_s=args.timeout)
    except (OSError, ValueError) as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    line = report.line(args.endpoint)
    if report.complete:
        print(f"{name}: {line}")
        return 0
    print(f"{name}: {line}", file=sys.stderr)
    return 1
