"""The Prometheus sink: a custom collector on its own registry, served over HTTP.

``GET /metrics`` answers in the Prometheus text format, or in OpenMetrics 1.0 when the
``Accept`` header asks for it (gzip when accepted); ``GET /healthz`` answers ``ok``, or
``degraded:`` and one line per problem that a check (:meth:`PrometheusSink.add_check`)
reports (still 200: the process serves; a restart would lose what a degraded sink holds).
OpenMetrics forbids ``_sum`` on histograms with negative bucket bounds, so that format
omits ``_count``/``_sum`` of those series (``_bucket{le="+Inf"}`` still gives the count);
the text format always has them.
"""

from __future__ import annotations

import errno
import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporters.base import ExportResult, Sink
from exporters.prometheus.families import declared
from exporters.prometheus.naming import Kind
from exporters.prometheus.serving import TokenDoor, http_server
from exporters.prometheus.store import SELF_PREFIX, SeriesStore
from telemetry.config import PrometheusConfig
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

SELF_METRICS: dict[str, Kind] = {
    f"{SELF_PREFIX}snapshots_total": "counter",
    f"{SELF_PREFIX}points_total": "counter",
    f"{SELF_PREFIX}export_errors_total": "counter",
    f"{SELF_PREFIX}overflow_points_total": "counter",
    f"{SELF_PREFIX}expired_series_total": "counter",
    f"{SELF_PREFIX}nonfinite_windows_total": "counter",
    f"{SELF_PREFIX}series": "gauge",
    f"{SELF_PREFIX}metrics_overflowing": "gauge",
    f"{SELF_PREFIX}name_collisions": "gauge",
}


class PrometheusSink(Sink):
    """Exposes Snapshots as Prometheus metrics on ``http://host:port/metrics``.

    Args:
        config: host, port (0 picks a free one), per-metric series limit, expiry; HTTPS
            (``cert_file``, ``key_file``) and a bearer token (``token_file``) when set.
        serve: start the HTTP server; False keeps only :meth:`render` (tests, benchmarks).
        clock: monotonic seconds used for expiry.
        key: the config section's full key, named in errors (``stats_logger.prometheus``).

    Raises:
        ConfigError: an invalid ``config``, or its address cannot be bound (the port is in
            use, the host is not local): the message names ``<key>.port`` / ``<key>.host``.
    """

    name = "prometheus"

    def __init__(
        self,
        config: PrometheusConfig | None = None,
        *,
        serve: bool = True,
        clock: Callable[[], float] = time.monotonic,
        key: str = "prometheus",
    ) -> None:
        self.config = config or PrometheusConfig()
        self._key = key
        token = self.config.token()
        if self.config.token_file is not None and token is None:
            raise ConfigError(f"{key}.token_file: no token in {self.config.token_file!r}")
        self._door = TokenDoor(token)
        self._lock = threading.Lock()
        self._store = SeriesStore(self.config.series_limit, self.config.expire_seconds, clock)
        self._store.reserve(SELF_METRICS)
        self._errors = 0
        self._closed = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_SinkCollector(self))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._checks: list[Callable[[], str | None]] = []
        if serve:
            self._serve()

    @property
    def port(self) -> int | None:
        """The bound port, or None when not serving."""
        return self._server.server_address[1] if self._server else None

    @property
    def url(self) -> str | None:
        """``http(s)://host:port/metrics``, or None when not serving."""
        scheme = "https" if self.config.cert_file else "http"
        return f"{scheme}://{self.config.host}:{self.port}/metrics" if self._server else None

    def register(self, collector: Collector) -> None:
        """Serve another collector's families (e.g. the collector process's own metrics).

        Args:
            collector: its ``collect()`` yields families, its ``describe()`` names them
                (:mod:`exporters.prometheus.families`); those names are kept out of the
                snapshot metrics' names.
        """
        names = declared(collector)
        with self._lock:
            self._store.reserve(names)
        self.registry.register(collector)

    def add_check(self, check: Callable[[], str | None]) -> None:
        """Report ``check()``'s problem, when it returns one, on ``/healthz``."""
        self._checks.append(check)

    def health(self) -> bytes:
        """The ``/healthz`` body: ``ok``, or ``degraded:`` and the checks' problems."""
        problems = [problem for problem in (check() for check in self._checks) if problem]
        if not problems:
            return b"ok\n"
        return "\n".join(["degraded:", *problems, ""]).encode()

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Fold ``snapshot`` into the exposed series; never raises (closed: PERMANENT)."""
        if self._closed:
            return ExportResult.PERMANENT_FAILURE
        try:
            with self._lock:
                self._store.apply(snapshot)
        except Exception as exc:  # a malformed snapshot cannot succeed on retry
            self._errors += 1
            logger.warning("prometheus sink: snapshot rejected: %s", exc)
            return ExportResult.PERMANENT_FAILURE
        return ExportResult.SUCCESS

    def collect(self) -> list[Metric]:
        """The families of one scrape, after expiring stale series."""
        with self._lock:
            self._store.expire()
            return [*self._store.collect(), *store_families(self._store, self._errors)]

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """One exposition as an HTTP response would carry it: ``(body, content_type)``."""
        encoder, content_type = choose_encoder(_keeping_names(accept))
        if content_type.startswith("application/openmetrics-text"):
            return encoder(_OpenMetricsView(self.registry)), content_type
        return encoder(self.registry), content_type

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop the HTTP server; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _serve(self) -> None:
        host, port = self.config.host, self.config.port
        try:
            self._server = http_server(
                (host, port), _handler(self), self.config.cert_file, self.config.key_file
            )
        except OSError as exc:
            raise ConfigError(_bind_error(self._key, host, port, exc)) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="rltel-prometheus-http",
            daemon=True,
        )
        self._thread.start()


def store_families(store: SeriesStore, errors: int) -> list[Metric]:
    """The :data:`SELF_METRICS` of a series store (the Prometheus sink's, or the remote-write
    sink's); ``errors``: snapshots it rejected. Called under the store's lock."""
    counters = {
        "snapshots": store.snapshots,
        "points": store.points,
        "export_errors": errors,
        "overflow_points": store.overflowed_points,
        "expired_series": store.expired_series,
        "nonfinite_windows": store.nonfinite_windows,
    }
    gauges = {
        "series": store.series_count,
        "metrics_overflowing": sum(bool(f.overflow) for f in store.families.values()),
        "name_collisions": store.collisions,
    }
    families = []
    for name, value in counters.items():
        metric = Metric(SELF_PREFIX + name, f"rltel Prometheus sink: {name}", "counter")
        metric.add_sample(f"{SELF_PREFIX}{name}_total", {}, value)
        families.append(metric)
    for name, value in gauges.items():
        metric = Metric(SELF_PREFIX + name, f"rltel Prometheus sink: {name}", "gauge")
        metric.add_sample(SELF_PREFIX + name, {}, value)
        families.append(metric)
    return families


def _bind_error(key: str, host: str, port: int, exc: OSError) -> str:
    """One line naming the config key to change when ``host:port`` cannot be bound."""
    if exc.errno == errno.EADDRINUSE:
        return f"{key}.port: {host}:{port} is in use; choose another port, or 0 for any free port"
    reason = exc.strerror or str(exc)
    if isinstance(exc, socket.gaierror):
        return f"{key}.host: {host} does not resolve ({reason})"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{key}.host: {host} is not an address of this machine ({reason})"
    return f"{key}.host/{key}.port: cannot serve Prometheus on {host}:{port}: {reason}"


class _SinkCollector:
    """Adapter: the registry's collector protocol over the sink's ``collect``."""

    def __init__(self, sink: PrometheusSink) -> None:
        self._sink = sink

    def collect(self) -> Iterator[Metric]:
        yield from self._sink.collect()


class _OpenMetricsView:
    """The registry's families without ``_count``/``_sum`` where a series has ``le < 0``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            if metric.type == "histogram":
                negative = {
                    _without_le(s.labels)
                    for s in metric.samples
                    if s.name.endswith("_bucket") and float(s.labels["le"]) < 0
                }
                if negative:
                    drop = {metric.name + "_count", metric.name + "_sum"}
                    metric.samples = [
                        s
                        for s in metric.samples
                        if not (s.name in drop and _without_le(s.labels) in negative)
                    ]
            yield metric


def _without_le(labels: dict[str, str]) -> frozenset:
    return frozenset((k, v) for k, v in labels.items() if k != "le")


def _keeping_names(accept: str) -> str:
    """``accept`` with ``escaping=allow-utf-8`` on every OpenMetrics entry that asks for none.

    Every family name here is a valid Prometheus name already
    (:func:`~exporters.prometheus.naming.sanitize`), and prometheus_client's default escaping
    for such a request (Prometheus 2 sends it) turns the ``:`` of names such as vLLM's
    ``vllm:num_requests_running`` into ``_``.
    """
    parts = accept.split(",")
    for i, part in enumerate(parts):
        media = part.split(";")[0].strip()
        if media == "application/openmetrics-text" and "escaping=" not in part:
            parts[i] = part + ";escaping=allow-utf-8"
    return ",".join(parts)


def _handler(sink: PrometheusSink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not sink._door.admits(self):
                return
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._reply(200, sink.health(), "text/plain; charset=utf-8")
            elif path in ("/metrics", "/"):
                try:
                    body, content_type = sink.render(self.headers.get("Accept", ""))
                except Exception as exc:
                    logger.exception("prometheus sink: scrape failed")
                    self._reply(500, f"scrape failed: {exc}\n".encode(), "text/plain")
                    return
                self._reply(200, body, content_type)
            else:
                self._reply(404, b"not found; try /metrics or /healthz\n", "text/plain")

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "") and len(body) > 1024
            if gzipped:
                body = gzip.compress(body, compresslevel=1)
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("prometheus http: " + format, *args)

    return Handler
