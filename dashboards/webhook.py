"""A minimal Alertmanager webhook receiver: one JSON line per alert on stdout.

``python -m dashboards.webhook --host 0.0.0.0 --port 9095`` accepts Alertmanager's webhook
POSTs (payload version 4) on any path and answers 200; ``GET /healthz`` answers ``ok``. The
docker-compose stack runs it as ``alert-webhook`` so that the example receivers of
``dashboards/alertmanager/alertmanager.yml`` deliver out of the box
(``docker compose logs -f alert-webhook``); point them at Slack, PagerDuty or your own
endpoint for real paging. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Notification:
    """One webhook call: when it arrived (monotonic seconds) and Alertmanager's payload."""

    received: float
    payload: dict[str, Any]

    def alerts(self) -> list[dict[str, Any]]:
        """The payload's alerts (each with status, labels, annotations)."""
        return list(self.payload.get("alerts", []))


def alert_line(alert: dict[str, Any], receiver: str) -> str:
    """One alert as a compact JSON log line."""
    labels = alert.get("labels", {})
    return json.dumps(
        {
            "status": alert.get("status"),
            "receiver": receiver,
            "alertname": labels.get("alertname"),
            "severity": labels.get("severity"),
            "labels": labels,
            "summary": alert.get("annotations", {}).get("summary"),
            "startsAt": alert.get("startsAt"),
        },
        sort_keys=True,
    )


class WebhookReceiver:
    """Serves the webhook on ``host:port`` (0 picks a free port) from a daemon thread.

    Args:
        host: address to bind.
        port: port to bind; 0 picks a free one.
        out: where alert lines are written (None: nowhere).
        clock: the time recorded as :attr:`Notification.received`.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        out: TextIO | None = sys.stdout,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._notifications: list[Notification] = []
        self._out = out
        self._clock = clock
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="rltel-alert-webhook",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://host:port/alerts``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/alerts"

    def notifications(self) -> list[Notification]:
        """Every notification received so far, oldest first."""
        with self._lock:
            return list(self._notifications)

    def record(self, payload: dict[str, Any]) -> None:
        """Keep one notification and log its alerts."""
        notification = Notification(self._clock(), payload)
        with self._lock:
            self._notifications.append(notification)
            if self._out is not None:
                receiver = str(payload.get("receiver", ""))
                for alert in notification.alerts():
                    print(alert_line(alert, receiver), file=self._out, flush=True)

    def shutdown(self) -> None:
        """Stop serving; safe to call twice."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] == "/healthz":
                self._reply(200, b"ok\n")
            else:
                self._reply(404, b"POST Alertmanager webhooks here; GET /healthz\n")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._reply(413, b"payload too large\n")
                return
            try:
                payload = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._reply(400, b"not JSON\n")
                return
            if not isinstance(payload, dict):
                self._reply(400, b"not a JSON object\n")
                return
            receiver.record(payload)
            self._reply(200, b"ok\n")

        def _reply(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per alert is logged by record()

    return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM or SIGINT (as PID 1 in a container too: ``docker stop`` ends it
    at once instead of waiting out the grace period), then exit 0."""
    parser = argparse.ArgumentParser(prog="python -m dashboards.webhook", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9095)
    args = parser.parse_args(argv)
    receiver = WebhookReceiver(args.host, args.port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: stop.set())
    print(f"alert webhook on {receiver.url}", file=sys.stderr, flush=True)
    try:
        stop.wait()
    finally:
        receiver.shutdown()


if __name__ == "__main__":
    main()
