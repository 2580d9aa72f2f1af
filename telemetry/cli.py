"""The ``rltel`` command: ``rltel demo`` and ``rltel collector``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int | None:
    """Dispatch to a subcommand; each parses its own arguments; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="rltel", description="rltel telemetry pipeline")
    parser.add_argument("command", choices=("demo", "collector"))
    args = parser.parse_args(argv[:1])
    if args.command == "demo":
        from telemetry.demo import main as demo_main

        demo_main(argv[1:])
        return 0
    from collector.__main__ import main as collector_main

    return collector_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
