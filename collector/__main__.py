"""``python -m collector`` / ``rltel collector``: run the OTLP collector until SIGTERM/SIGINT.

On SIGTERM the collector stops accepting requests, finishes the calls in flight, drains
every sink queue within ``limits.drain_timeout_s`` and closes every sink (W&B/SwanLab runs
finished), then exits 0. A bad configuration exits 2 with one line naming the key.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from collector.config import default_config, load, to_yaml
from telemetry.model.errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the collector.

    Args:
        argv: command-line arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 after a clean shutdown, 2 for a bad configuration, 1 when the
        receiver or the metrics endpoint cannot bind.
    """
    parser = argparse.ArgumentParser(
        prog="rltel collector", description="OTLP/gRPC collector fanning out to rltel's sinks"
    )
    parser.add_argument("--config", metavar="PATH", help="collector YAML (default: built-ins)")
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    args = parser.parse_args(argv)
    try:
        config = load(args.config) if args.config else default_config()
    except ConfigError as exc:
        print(f"rltel collector: error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write(to_yaml(config))
        return 0
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from collector.server import CollectorServer

    try:
        server = CollectorServer(config)
        server.start()
    except OSError as exc:
        print(f"rltel collector: error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        del frame
        logging.getLogger(__name__).info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(
        f"rltel collector: otlp={server.endpoint} metrics={server.metrics_url or 'off'}",
        flush=True,
    )
    while not stop.wait(0.5):
        pass
    server.stop()
    print("rltel collector: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
