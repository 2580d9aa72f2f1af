"""The ``rltel`` command: ``rltel demo``, ``rltel collector`` and ``rltel report``."""

from __future__ import annotations

import argparse
import sys
import warnings

from telemetry.cli_args import OneLineParser

COMMANDS = {
    "demo": "run a 2-rank RL training job through the whole pipeline",
    "collector": "run the OTLP/gRPC collector, fanning out to the sinks",
    "report": "draw figures and an HTML page from runs' TensorBoard event files",
}
PYNVML_DEPRECATION = "The pynvml package is deprecated"


def hide_pynvml_warning() -> None:
    """Ignore the FutureWarning that importing ``torch.cuda`` raises from ``pynvml``, only it."""
    warnings.filterwarnings("ignore", message=PYNVML_DEPRECATION, category=FutureWarning)


# At import too: the ranks `rltel demo` spawns re-import this entry module (as __mp_main__)
# before they import torch.
hide_pynvml_warning()


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
    if command == "demo":
        from telemetry.demo.cli import main as demo_main

        return demo_main(argv[1:])
    if command == "report":
        from telemetry.report.cli import main as report_main

        return report_main(argv[1:])
    from collector.__main__ import main as collector_main

    return collector_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
