"""The ``rltel`` command: ``rltel demo``, ``rltel collector``, ``rltel report``, ``rltel spool``.

A missing library never ends a command in a traceback: ``rltel demo`` checks its sinks'
libraries before it starts a rank, and any command whose import fails prints one line
naming the extra to install; both exit 2.
"""

from __future__ import annotations

import argparse
import sys

from rltel.quiet_pynvml import hide_pynvml_warning
from telemetry.config.cli_args import (
    OneLineParser,
    install_line,
    missing_libraries,
    missing_module_line,
)

COMMANDS = {
    "demo": "run a 2-rank RL training job through the whole pipeline",
    "collector": "run the OTLP/gRPC collector, fanning out to the sinks",
    "report": "draw figures and an HTML page from runs' TensorBoard event files",
    "spool": "send OTLP spools left on disk to a collector (rltel spool flush DIR --endpoint)",
}
DEMO_LIBRARIES = ("wandb", "swanlab", "tensorboard", "trackio")
"""What the demo's W&B, SwanLab, TensorBoard and Trackio sinks import (in rank 0 or its
collector)."""


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rltel",
        description="rltel telemetry pipeline; `rltel COMMAND --help` shows a command's options",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=24),
    )
    commands = parser.add_subparsers(title="commands", dest="command", required=True)
    for name, summary in COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; each parses its own arguments; returns the exit status."""
    hide_pynvml_warning()
    argv = sys.argv[1:] if argv is None else argv
    command = _parser().parse_args(argv[:1]).command
    try:
        return _run(command, argv[1:])
    except ModuleNotFoundError as exc:
        print(f"rltel {command}: error: {missing_module_line(exc)}", file=sys.stderr)
        return 2


def _run(command: str, argv: list[str]) -> int:
    if command == "demo":
        return _demo(argv)
    if command == "report":
        from rltel.report.cli import main as report_main

        return report_main(argv)
    if command == "spool":
        from rltel.spool_cli import main as spool_main

        return spool_main(argv)
    from collector.__main__ import main as collector_main

    return collector_main(argv)


def _demo(argv: list[str]) -> int:
    """``rltel demo``, once its sinks' libraries are known to be there (not needed when it
    sends to a collector of the user's: that one runs the sinks)."""
    from rltel.demo.cli import main as demo_main
    from rltel.demo.cli import parser as demo_parser

    if demo_parser().parse_args(argv).otlp_endpoint is None:
        missing = missing_libraries(DEMO_LIBRARIES)
        if missing:
            print(
                f"rltel demo: error: {install_line(missing)} (the demo writes W&B, SwanLab, "
                "TensorBoard and Trackio files; rltel[all] installs every library rltel's "
                "commands use)",
                file=sys.stderr,
            )
            return 2
    return demo_main(argv)
