"""Command line of ``rltel demo``, torch-free: bad arguments fail fast, before any rank starts."""

from __future__ import annotations

import argparse
import socket
import sys

from rltel.demo.options import DEFAULT_ROLLOUT_WORKERS, PROMETHEUS_HOST, DemoOptions
from telemetry.config.cli_args import (
    MAX_PORT,
    OneLineParser,
    non_negative_int,
    port_in_use,
    positive_int,
    seconds,
    tcp_port,
)

CONNECT_TIMEOUT_S = 3.0


def otlp_endpoint(text: str) -> str:
    """A collector address ``HOST:PORT`` (no scheme, port 1-65535); IPv6 as ``[::1]:PORT``."""
    if "://" in text:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT without a scheme, got {text!r}")
    host, sep, port = text.rpartition(":")
    if not sep or not host.strip("[]") or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, e.g. 127.0.0.1:4317, got {text!r}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise argparse.ArgumentTypeError(
            f"must be HOST:PORT with an IPv6 host in brackets ([::1]:4317), got {text!r}"
        )
    if not port.isdigit() or not 1 <= int(port) <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port must be 1-{MAX_PORT}, got {text!r}")
    return text


def reachable(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to ``endpoint`` opens, else why not."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


class _Given(argparse.Action):
    """Stores the value and notes that the option was given (``<dest>_given``)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def parser() -> argparse.ArgumentParser:
    """The ``rltel demo`` argument parser: every option has help text and shows its default."""
    result = OneLineParser(
        prog="rltel demo",
        description=(
            "A real multi-rank RL run through the whole pipeline: in-process sinks by default, "
            "or over OTLP to a collector (--collector starts one, --otlp-endpoint uses yours)."
        ),
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
        help="W&B, SwanLab, TensorBoard and Trackio files go under FILEROOT/rltel-demo/trial0",
    )
    result.add_argument(
        "--prometheus-port",
        type=tcp_port,
        default=DemoOptions.prometheus_port,
        action=_Given,
        help=f"port of the demo's Prometheus endpoint on {PROMETHEUS_HOST} (0: any free port); "
        "of the collector's when the demo starts one (then, unless given, any free port); of "
        "a running collector's on its host when the demo sends to one (where the demo reads "
        "its health at the end)",
    )
    result.add_argument(
        "--serve-seconds",
        type=seconds,
        default=DemoOptions.serve_seconds,
        help="keep the Prometheus endpoint up this long after the run",
    )
    where = result.add_mutually_exclusive_group()
    where.add_argument(
        "--collector",
        action="store_true",
        help="start an `rltel collector` subprocess on free loopback ports and send to it "
        "over OTLP (ranks and rollout workers); it fans out to the sinks, and the demo exits "
        "1 when the collector reports a sink that failed to start, is degraded or dropped data",
    )
    where.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        metavar="HOST:PORT",
        help="send over OTLP to the collector already running there (no in-process sinks)",
    )
    result.add_argument(
        "--rollout-workers",
        type=non_negative_int,
        default=DEFAULT_ROLLOUT_WORKERS,
        action=_Given,
        metavar="N",
        help="rollout worker processes that sample with the current policy and export their "
        "own streams over OTLP (needs a collector; 0: the ranks sample)",
    )
    result.add_argument(
        "--verbose",
        action="store_true",
        help="print the full metrics table every step instead of the progress bar",
    )
    return result


def parse(argv: list[str] | None = None) -> DemoOptions:
    """Options from ``argv``; a bad value, a busy port or an unreachable collector exits 2."""
    demo_parser = parser()
    args = demo_parser.parse_args(argv)
    otlp = args.collector or args.otlp_endpoint is not None
    port = args.prometheus_port
    if args.collector and not getattr(args, "prometheus_port_given", False):
        port = 0  # the stack's collector, or another demo, may hold the default port
    if getattr(args, "rollout_workers_given", False) and not otlp:
        demo_parser.error(
            "argument --rollout-workers: needs --collector or --otlp-endpoint"
            " (the embedded default has no rollout workers)"
        )
    if args.otlp_endpoint is None and port_in_use(PROMETHEUS_HOST, port):
        demo_parser.error(
            f"argument --prometheus-port: port {port} on {PROMETHEUS_HOST}"
            " is in use (choose another, or 0 for any free port)"
        )
    if args.otlp_endpoint is not None:
        why = reachable(args.otlp_endpoint)
        if why is not None:
            demo_parser.error(
                f"argument --otlp-endpoint: no collector accepts connections at "
                f"{args.otlp_endpoint} ({why}); start one (rltel collector) or use --collector"
            )
    return DemoOptions(
        ranks=args.ranks,
        steps=args.steps,
        fileroot=args.fileroot,
        prometheus_port=port,
        serve_seconds=args.serve_seconds,
        collector=args.collector,
        otlp_endpoint=args.otlp_endpoint,
        rollout_workers=args.rollout_workers if otlp else 0,
        verbose=args.verbose,
    )


def main(argv: list[str] | None = None) -> int:
    """``rltel demo``: check the arguments, then import torch and run."""
    options = parse(argv)
    from rltel.demo import run_demo
    from rltel.demo.collector import CollectorFailed

    try:
        return run_demo(options)
    except CollectorFailed as exc:
        print(f"rltel demo: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rltel demo: interrupted; every process it started has ended", file=sys.stderr)
        return 130
