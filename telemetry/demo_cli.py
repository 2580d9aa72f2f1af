"""Command line of ``rltel demo``, torch-free: bad arguments fail fast, before any rank starts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from telemetry.cli_args import OneLineParser, port_in_use, positive_int, seconds, tcp_port

PROMETHEUS_HOST = "127.0.0.1"


@dataclass(frozen=True)
class DemoOptions:
    """What ``rltel demo`` runs."""

    ranks: int = 2
    steps: int = 12
    fileroot: str = "runs"
    prometheus_port: int = 9464
    serve_seconds: float = 0.0


def parser() -> argparse.ArgumentParser:
    """The ``rltel demo`` argument parser: every option has help text and shows its default."""
    result = OneLineParser(
        prog="rltel demo",
        description="A real multi-rank RL run through the whole pipeline (in-process sinks).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    result.add_argument(
        "--ranks", type=positive_int, default=DemoOptions.ranks, help="gloo ranks (processes)"
    )
    result.add_argument(
        "--steps", type=positive_int, default=DemoOptions.steps, help="training steps"
    )
    result.add_argument(
        "--fileroot",
        default=DemoOptions.fileroot,
        help="W&B, SwanLab and TensorBoard files go under FILEROOT/rltel-demo/trial0",
    )
    result.add_argument(
        "--prometheus-port",
        type=tcp_port,
        default=DemoOptions.prometheus_port,
        help=f"port of the Prometheus endpoint on {PROMETHEUS_HOST} (0: any free port)",
    )
    result.add_argument(
        "--serve-seconds",
        type=seconds,
        default=DemoOptions.serve_seconds,
        help="keep the Prometheus endpoint up this long after the run",
    )
    return result


def parse(argv: list[str] | None = None) -> DemoOptions:
    """Options from ``argv``; a bad value or a busy port exits 2 with one line on stderr."""
    demo_parser = parser()
    args = demo_parser.parse_args(argv)
    if port_in_use(PROMETHEUS_HOST, args.prometheus_port):
        demo_parser.error(
            f"argument --prometheus-port: port {args.prometheus_port} on {PROMETHEUS_HOST}"
            " is in use (choose another, or 0 for any free port)"
        )
    return DemoOptions(
        args.ranks, args.steps, args.fileroot, args.prometheus_port, args.serve_seconds
    )


def main(argv: list[str] | None = None) -> int:
    """``rltel demo``: check the arguments, then import torch and spawn the ranks."""
    options = parse(argv)
    from telemetry.demo import run_demo

    run_demo(options)
    return 0
