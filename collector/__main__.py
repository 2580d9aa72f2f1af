"""``python -m collector`` / ``rltel collector``: run the OTLP collector until SIGTERM/SIGINT.

On SIGTERM the collector stops accepting requests, finishes the calls in flight, drains
every sink queue within ``limits.drain_timeout_s`` and closes every sink (W&B/SwanLab runs
finished), then exits 0. A bad configuration, or a port in use, exits 2 with one line naming
the key; ``--otlp-port`` and ``--prometheus-port`` override the two ports' keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from collector.config import CollectorConfig, default_config, load, to_yaml
from telemetry.config.cli_args import OneLineParser, tcp_port
from telemetry.model.errors import ConfigError

PROG = "rltel collector"
PORT_OPTIONS = {
    "collector.receiver.": "--otlp-port",
    "collector.sinks.prometheus.": "--prometheus-port",
}
"""A section whose ``port`` a bind error names -> the option that overrides that port."""


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, description="OTLP/gRPC collector fanning out to rltel's sinks"
    )
    parser.add_argument("--config", metavar="PATH", help="collector YAML (default: built-ins)")
    parser.add_argument(
        "--otlp-port",
        type=tcp_port,
        metavar="PORT",
        help="the OTLP/gRPC receiver's port, over receiver.port (default 4317; 0: any free port)",
    )
    parser.add_argument(
        "--prometheus-port",
        type=tcp_port,
        metavar="PORT",
        help="the Prometheus endpoint's port, over sinks.prometheus.port (default 9464; 0: any "
        "free port)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    return parser


def _with_ports(
    config: CollectorConfig, otlp_port: int | None, prometheus_port: int | None
) -> CollectorConfig:
    """``config`` with the receiver's and the Prometheus endpoint's ports replaced if given."""
    if otlp_port is not None:
        receiver = dataclasses.replace(config.receiver, port=otlp_port)
        config = dataclasses.replace(config, receiver=receiver)
    if prometheus_port is not None:
        prometheus = dataclasses.replace(config.sinks.prometheus, port=prometheus_port)
        config = dataclasses.replace(
            config, sinks=dataclasses.replace(config.sinks, prometheus=prometheus)
        )
    return config


def _config_error(exc: ConfigError) -> int:
    """Print one line naming the key (and the option that sets it); the exit status 2."""
    message = str(exc)
    named = message.split(" ", 1)[0]  # the key(s) the error names: a port's gets its option
    options = [option for key, option in PORT_OPTIONS.items() if f"{key}port" in named]
    hint = f" ({options[0]} overrides it)" if options else ""
    print(f"{PROG}: error: {message}{hint}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the collector.

    Args:
        argv: command-line arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 after a clean shutdown; 2 for a bad argument or configuration, or
        when the receiver or the Prometheus endpoint cannot bind (one line naming the key).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = load(args.config) if args.config else default_config()
    except ConfigError as exc:
        return _config_error(exc)
    if args.prometheus_port is not None and not config.sinks.prometheus.enabled:
        parser.error(
            f"argument --prometheus-port: {args.config} sets sinks.prometheus.enabled: false"
        )
    config = _with_ports(config, args.otlp_port, args.prometheus_port)
    if args.print_config:
        sys.stdout.write(to_yaml(config))
        return 0
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from collector.server import CollectorServer

    try:
        server = CollectorServer(config)
    except ConfigError as exc:
        return _config_error(exc)
    try:
        server.start()
    except ConfigError as exc:
        server.stop(5.0)
        return _config_error(exc)
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        del frame
        logging.getLogger(__name__).info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(
        f"{PROG}: otlp={server.endpoint} metrics={server.metrics_url or 'off'}",
        flush=True,
    )
    while not stop.wait(0.5):
        pass
    server.stop()
    print(f"{PROG}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
