"""A real VictoriaMetrics (Debian's single-node ``victoria-metrics``) on a free loopback
port, and a relay that hands each remote write to several stores.

:func:`victoria_metrics` starts the server with the flags of the recipe in docs/stack.md
("At scale: several collectors into one store"), its storage in the test's own folder,
and stops it by PID. A collector has one ``remote_write.url``; :class:`Tee` receives its
writes and POSTs the same bytes, with the same headers, to every store, so two stores hold
exactly the same samples and their query answers can be compared.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.dashboards import servers
from tests.distributed import free_port

DEDUP = "-dedup.minScrapeInterval=1ms"
"""One sample per series and millisecond: a replayed write (same series, same timestamp)
is stored once, as Prometheus stores it once."""
FLAGS = (DEDUP, "-search.latencyOffset=0s")
"""The recipe's flags besides storage and address. ``-search.latencyOffset=0s``: an
instant query at "now" reads the newest samples, as Prometheus does (the default, 30s,
evaluates such a query 30 s in the past)."""


@contextmanager
def victoria_metrics(
    tmp_path: Path, flags: Sequence[str] = FLAGS, port: int | None = None
) -> Iterator[str]:
    """A ``victoria-metrics`` server storing in ``tmp_path / "vm-data"``; yields its base
    URL (remote write at ``/api/v1/write``, queries at ``/api/v1/query[_range]``)."""
    port = port or free_port()
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = [
        "victoria-metrics",
        f"-storageDataPath={tmp_path / 'vm-data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        *flags,
    ]
    with servers._process(args, tmp_path / "victoria-metrics.log", "/health", port) as url:
        yield url


def query(store: str, path: str, **params: object) -> dict:
    """``data`` of a Prometheus-API query (``query`` or ``query_range``) on ``store``.

    Raises:
        AssertionError: the store answered an error, naming the query and the answer.
    """
    text = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    try:
        body = json.loads(servers.get(f"{store}/api/v1/{path}?{text}", timeout=30))
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{store} {path} {params}: {exc.read().decode()}") from exc
    assert body["status"] == "success", (store, params, body)
    return body["data"]


class Tee:
    """An HTTP server on a free loopback port that forwards each POST's body and headers to
    every URL of ``stores`` (their ``/api/v1/write``) and answers 204 when all took it, else
    the first refusal's status and text.

    Args:
        stores: the stores' base URLs.
    """

    def __init__(self, stores: Sequence[str]) -> None:
        self.stores = [store + "/api/v1/write" for store in stores]
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The remote-write URL to give the collectors."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/api/v1/write"

    def forward(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST ``body`` to every store; ``(status, text)`` of the answer to give."""
        self.requests += 1
        answer = (204, b"")
        for url in self.stores:
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    response.read()
            except urllib.error.HTTPError as exc:
                if answer[0] == 204:
                    answer = (exc.code, exc.read())
            except OSError as exc:  # a store down: retryable for the sender
                if answer[0] == 204:
                    answer = (503, str(exc).encode())
        return answer

    def close(self) -> None:
        """Stop serving; safe to call twice."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


_FORWARDED = ("Content-Encoding", "Content-Type", "X-Prometheus-Remote-Write-Version")


def _handler(tee: Tee) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {name: self.headers[name] for name in _FORWARDED if name in self.headers}
            status, text = tee.forward(body, headers)
            self.send_response(status)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, format: str, *args: object) -> None:
            """Writes are not logged."""

    return Handler
