"""The OTLP/gRPC receiver: ``MetricsService/Export``, health, auth, TLS, self-metrics.

Status codes returned by ``Export``:

==================  ===========================================================
OK                  admitted: every point is in every healthy sink's queue (and
                    journal, with ``durable`` on);
                    ``partial_success`` counts the points that were not mapped
INVALID_ARGUMENT    not an ``ExportMetricsServiceRequest``, or over
                    ``max_points_per_request`` / ``max_decoded_bytes`` (split it)
UNAUTHENTICATED     a token is configured and the call lacks it or has another
RESOURCE_EXHAUSTED  a sink queue (or its durable journal) or the memory budget
                    cannot take it now, or too many heavy requests at once
                    (retry after the delay sent in
                    ``grpc-retry-pushback-ms`` and ``google.rpc.retryinfo-bin``);
                    over ``max_message_bytes``/``max_concurrent_requests`` (gRPC)
DEADLINE_EXCEEDED   the sender's deadline passed before the request was kept
UNAVAILABLE         shutting down, or a sink of the request's run cannot start
                    (retry after the delay sent, as above)
==================  ===========================================================

``TraceService/Export`` and ``LogsService/Export`` are served on the same port, through the
same gate (auth, deadline, heavy requests, memory budget), to the consumers passed as
``trace_consumers`` and ``log_consumers`` (:mod:`collector.signal_service`: their own status codes,
the per-request span/record caps, the durable journal).

Every refusal keeps nothing of the request. The body is parsed in the handler (not by
gRPC's deserializer), after the deadline check and the heavy-request gate, so that a
malformed one is answered INVALID_ARGUMENT and its parse is charged to the memory budget.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from collector.auth import receiver_check
from collector.config import ROOT, CollectorConfig
from collector.durable import DurableState
from collector.gate import RequestGate
from collector.pipeline import Pipeline
from collector.refusals import Refused
from collector.samples import SamplesConsumer
from collector.scrape import Scraper
from collector.selfmetrics import SelfMetrics
from collector.signal_service import LOGS, TRACES, SignalConsumer, SignalService
from collector.sinks import RunSinkFactory, shared_sinks
from collector.traces import TraceMerge
from collector.traces.metrics import TraceMetrics
from exporters.memory_charge import MemoryCharge
from exporters.prometheus import PrometheusSink
from exporters.remote_write import RemoteWriteSink
from telemetry.config.cli_args import check_bindable
from telemetry.model.errors import ConfigError

logger = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
RECEIVER_KEY = f"{ROOT}.receiver"


def trace_merge(config: CollectorConfig, pipeline: Pipeline) -> TraceMerge:
    """The collector's trace merge: runs' directories as their sinks' (``sinks.fileroot``),
    the duration histograms into ``pipeline``'s shared sinks and runs
    (:meth:`~collector.pipeline.Pipeline.deliver`), ``limits`` applied."""

    def run_dir(experiment: str, trial: str) -> Path:
        return config.sinks.logger_config(experiment, trial).run_dir

    limits = config.limits
    return TraceMerge(config.traces, run_dir, pipeline.deliver, limits, limits.max_runs)


class CollectorServer:
    """The collector process's server: gRPC receiver plus the pipeline behind it.

    Args:
        config: the validated collector configuration.
        pipeline: the pipeline to feed; default: built from ``config.sinks`` (Prometheus
            shared, per-run W&B/SwanLab/TensorBoard/console).
        prometheus: the Prometheus sink that serves the self-metrics (with a given
            ``pipeline``); default: the one built from ``config.sinks``, if enabled.
        trace_consumers: handed every accepted ``TraceService/Export`` request
            (:class:`~collector.signal_service.SignalConsumer`); with the pipeline built here, the
            trace merge of ``config.traces`` (:func:`trace_merge`) first.
        log_consumers: handed every accepted ``LogsService/Export`` request
            (:class:`~collector.signal_service.SignalConsumer`); with the pipeline built here, the
            samples' consumer of ``config.sinks.samples``
            (:class:`collector.samples.SamplesConsumer`) first.

    The per-request bounds and the heavy-request gate are the pipeline's ``limits`` (with
    the pipeline built here, ``config.limits``).

    Raises:
        ConfigError: the Prometheus address (here) or the receiver's (on :meth:`start`)
            cannot be bound; the message names the key (``collector.receiver.port``, ...).
    """

    def __init__(
        self,
        config: CollectorConfig,
        pipeline: Pipeline | None = None,
        prometheus: PrometheusSink | None = None,
        *,
        trace_consumers: Sequence[SignalConsumer] = (),
        log_consumers: Sequence[SignalConsumer] = (),
    ) -> None:
        self.config = config
        self.run_sinks: RunSinkFactory | None = None
        self.trace_merge: TraceMerge | None = None
        self.samples: SamplesConsumer | None = None
        if pipeline is None:
            shared = shared_sinks(config.sinks)
            prometheus = next((s for s in shared if isinstance(s, PrometheusSink)), None)
            self.run_sinks = RunSinkFactory(config.sinks)
            pipeline = Pipeline(shared, self.run_sinks, config.limits)
            self.trace_merge = trace_merge(config, pipeline)
            trace_consumers = [self.trace_merge, *trace_consumers]
            self.samples = SamplesConsumer(pipeline.runs, config.sinks.samples)
            log_consumers = [self.samples, *log_consumers]
        self.pipeline = pipeline
        self.limits = pipeline.limits
        token = config.auth.token()
        self._gate = RequestGate(
            receiver_check(token) if token is not None else None,
            pipeline,
            threading.Semaphore(self.limits.max_heavy_requests),
        )
        self.signals = (
            SignalService(TRACES, trace_consumers, self.limits, self._gate.heavy),
            SignalService(LOGS, log_consumers, self.limits, self._gate.heavy),
        )
        self.prometheus = prometheus
        self._lock = threading.Lock()
        self._codes: Counter[str] = Counter()  # status code -> requests answered with it
        self._bytes = 0
        self._server: grpc.Server | None = None
        self._health = health.HealthServicer(experimental_non_blocking=True)
        self.port: int | None = None
        if self.prometheus is not None:
            self.prometheus.register(self.self_metrics(self.signals))
            if self.trace_merge is not None:
                self.prometheus.register(TraceMetrics(self.trace_merge))
        self.scraper: Scraper | None = None
        if config.scrape.targets or config.scrape.targets_file:
            self.scraper = Scraper(config.scrape, pipeline.deliver)
            if self.prometheus is not None:
                self.prometheus.register(self.scraper.health)
        for sink in (queued.sink for queued in pipeline.shared.queued):
            if isinstance(sink, RemoteWriteSink):  # its counters on /metrics, its state on
                sink.add_source(self.self_metrics())  # /healthz; ours remote-written
                sink.add_source(pipeline.heartbeats, own=False)
                if self.prometheus is not None:
                    self.prometheus.register(sink.health)
                    self.prometheus.add_check(sink.health.problem)

    @property
    def endpoint(self) -> str:
        """``host:port`` of the bound receiver."""
        return f"{self.config.receiver.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """``http://host:port/metrics`` of the Prometheus endpoint, if one is served."""
        return self.prometheus.url if self.prometheus is not None else None

    def self_metrics(self, signals: Sequence[SignalService] = ()) -> SelfMetrics:
        """A prometheus_client collector of this server's and its pipeline's counters (and
        of ``signals``' counters)."""
        return SelfMetrics(
            self.request_counts, lambda: self._bytes, self.pipeline.stats, self.run_sinks, signals
        )

    def request_counts(self) -> dict[str, int]:
        """Export calls answered so far, by status code name."""
        with self._lock:
            return dict(self._codes)

    def start(self) -> None:
        """Bind and serve; returns at once."""
        receiver, limits = self.config.receiver, self.config.limits
        address = f"{receiver.host}:{receiver.port}"
        check_bindable(RECEIVER_KEY, receiver.host, receiver.port)
        options = [
            ("grpc.max_receive_message_length", receiver.max_message_bytes),
            ("grpc.max_send_message_length", receiver.max_message_bytes),
            # gRPC sets SO_REUSEPORT by default: a second collector on the same port would
            # bind and take half the senders' connections instead of failing.
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(receiver.max_workers, thread_name_prefix="rltel-otlp"),
            options=options,
            maximum_concurrent_rpcs=limits.max_concurrent_requests,
        )
        handler = grpc.unary_unary_rpc_method_handler(
            self._export,
            request_deserializer=None,
            response_serializer=ExportMetricsServiceResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),)
        )
        for service in self.signals:
            handler = grpc.unary_unary_rpc_method_handler(
                self._signal_export(service),
                request_deserializer=None,
                response_serializer=service.kind.response.SerializeToString,
            )
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(service.kind.service, {"Export": handler}),)
            )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        try:
            if receiver.tls.enabled:
                key = Path(receiver.tls.key_file).read_bytes()
                cert = Path(receiver.tls.cert_file).read_bytes()
                credentials = grpc.ssl_server_credentials([(key, cert)])
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if not port:
            raise ConfigError(
                f"{RECEIVER_KEY}.host/{RECEIVER_KEY}.port: cannot bind the OTLP receiver to "
                f"{address} (not a local address, or in use)"
            )
        durable = self.config.durable
        if durable.enabled and self.run_sinks is not None and self.pipeline.durable is None:
            directory = durable.state_dir(self.config.sinks.fileroot, port)
            limit, fsync = durable.limit_bytes, durable.fsync == "request"
            key = f"{ROOT}.durable.directory" if durable.directory else f"{ROOT}.sinks.fileroot"
            state = DurableState(directory, limit, fsync, key)
            self.pipeline.recover(state)  # replayed into the queues before any request
            state.attach_decoder(self.pipeline.decoder)  # the senders' totals taken up
            for service in self.signals:  # and to the consumers
                try:
                    service.recover(state.directory, limit, fsync)
                except OSError as exc:
                    raise ConfigError(f"{key}: {exc}") from None
        server.start()
        self._server, self.port = server, port
        for service in ("", SERVICE, *(signal.kind.service for signal in self.signals)):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        logger.info("rltel collector: OTLP/gRPC on %s", self.endpoint)
        if self.scraper is not None:
            self.scraper.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop accepting, finish calls in flight, drain the sink queues, close every sink.

        Args:
            timeout_s: the whole shutdown's deadline (default ``limits.drain_timeout_s``).
        """
        timeout_s = self.config.limits.drain_timeout_s if timeout_s is None else timeout_s
        self._health.enter_graceful_shutdown()
        if self._server is not None:
            grace = min(5.0, timeout_s / 4)
            self._server.stop(grace).wait(grace + 1.0)
            self._server = None
        if self.scraper is not None:
            self.scraper.stop(min(5.0, timeout_s / 4))
        if self.samples is not None:  # no request comes any more: every waiting sample to
            self.samples.release()  # its sinks' queues, so the logs journal is acknowledged
        for service in self.signals:  # before the pipeline's shutdown closes the durable state
            service.shutdown(min(5.0, timeout_s / 4))
        self.pipeline.shutdown(timeout_s)

    def _export(self, data: bytes, context: grpc.ServicerContext) -> ExportMetricsServiceResponse:
        return self._gate.serve(data, context, self._ingest, self._tally)

    def _signal_export(self, service: SignalService) -> Callable[[bytes, Any], Message]:
        """The handler of ``service``'s Export: the same gate, then the service."""

        def ingest(data: bytes, expired, heavy: bool, hold: MemoryCharge) -> Message:
            del hold  # the gate holds the parse's budget until the consumers return
            try:
                return service.ingest(data, expired, heavy)
            except Refused:
                raise
            except Exception as exc:  # a bug must cost one request, never the server
                logger.exception("collector: %s request failed", service.kind.name)
                raise Refused(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}") from None

        return lambda data, context: self._gate.serve(data, context, ingest, service.tally)

    def _ingest(
        self, data: bytes, expired, heavy: bool, hold: MemoryCharge
    ) -> ExportMetricsServiceResponse:
        try:
            message = ExportMetricsServiceRequest.FromString(data)
        except DecodeError as exc:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, f"not an ExportMetricsServiceRequest: {exc}"
            ) from None
        request = self.pipeline.decoder.read(message)
        entered = False
        if not heavy and request.points > self.limits.heavy_request_points:
            if not self._gate.heavy.acquire(blocking=False):
                raise self._gate.refuse_heavy("too many large requests")
            entered = True
        try:
            result = self.pipeline.consume(request, expired, hold)
        except Refused:
            raise
        except Exception as exc:  # a bug must cost one request, never the server
            logger.exception("collector: request failed")
            raise Refused(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}") from None
        finally:
            if entered:
                self._gate.heavy.release()
        response = ExportMetricsServiceResponse()
        if result.rejected:
            response.partial_success.rejected_data_points = result.rejected
            response.partial_success.error_message = result.message
        return response

    def _tally(self, code: str, size: int) -> None:
        with self._lock:
            self._codes[code] += 1
            self._bytes += size
