"""vLLM and SGLang ``/metrics`` endpoints as the engines serve them, on loopback.

Both engines expose their metrics with ``prometheus_client`` (``generate_latest`` of its
registry, the Prometheus text format 0.0.4 with ``_created`` gauges), so these endpoints
build the same metric objects in a registry of their own and serve that exposition: the
bytes a real server sends, from the names, types, label names and buckets in the engines'
code, with values the test sets.

- vLLM: ``vllm/v1/metrics/loggers.py`` at vllm-project/vllm commit
  ``005a810bc40faa25b8870fbc8559c3462581eee3`` (``PrometheusStatLogger``: labels
  ``model_name`` and ``engine``; ``vllm:kv_cache_usage_perc``, ``vllm:prefix_cache_*`` and
  their deprecated ``vllm:gpu_*`` twins, ``vllm:time_per_output_token_seconds`` for the
  inter-token latency). Later vLLM releases serve ``vllm:inter_token_latency_seconds`` next
  to it with the same buckets; ``Engine("vllm", itl=True)`` serves both.
- SGLang: ``python/sglang/srt/metrics/collector.py`` at sgl-project/sglang commit
  ``93d04878cfb9b08645fae7b11bd340ee33b34acf`` (``SchedulerMetricsCollector`` and
  ``TokenizerMetricsCollector``; the label names are those SGLang's own metrics tests pass:
  ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``).

:meth:`Engine.restart` starts from a fresh registry: every counter and histogram back at
zero, as after an engine restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

VLLM_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
VLLM_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
SGLANG_TTFT_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
)  # fmt: skip
SGLANG_ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
SGLANG_E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
)  # fmt: skip

MODEL = "Qwen/Qwen2.5-7B-Instruct"


class Engine:
    """One engine's metrics; ``kind`` is ``"vllm"`` or ``"sglang"``; ``engines`` DP engines
    (vLLM's ``engine`` label); ``extra_series`` more gauge series (``rltel_test:extra``)."""

    def __init__(
        self, kind: str, engines: int = 1, extra_series: int = 0, itl: bool = False
    ) -> None:
        self.kind = kind
        self.itl = itl
        self.engines = engines
        self.extra_series = extra_series
        self.restart()

    def restart(self) -> None:
        """A fresh registry: counters and histograms at zero."""
        self.registry = CollectorRegistry()
        build = self._vllm if self.kind == "vllm" else self._sglang
        self.m = build(self.registry)
        for engine in range(self.engines):  # every series exists from the start, as in vLLM
            for metric in self.m.values():
                metric.labels(**self.labels(engine))
        if self.extra_series:
            extra = Gauge("rltel_test:extra", "padding", ["shard"], registry=self.registry)
            for i in range(self.extra_series):
                extra.labels(str(i)).set(i)

    def labels(self, engine: int = 0) -> dict[str, str]:
        if self.kind == "vllm":
            return {"model_name": MODEL, "engine": str(engine)}
        return {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}

    def _vllm(self, registry: CollectorRegistry) -> dict:
        names = ["model_name", "engine"]

        def gauge(name: str) -> Gauge:
            return Gauge(name, name, names, registry=registry)

        def counter(name: str) -> Counter:
            return Counter(name, name, names, registry=registry)

        def histogram(name: str, buckets) -> Histogram:
            return Histogram(name, name, names, buckets=buckets, registry=registry)

        return {
            "running": gauge("vllm:num_requests_running"),
            "waiting": gauge("vllm:num_requests_waiting"),
            "kv": gauge("vllm:kv_cache_usage_perc"),
            "gpu_kv": gauge("vllm:gpu_cache_usage_perc"),
            "prefix_queries": counter("vllm:prefix_cache_queries"),
            "prefix_hits": counter("vllm:prefix_cache_hits"),
            "gpu_prefix_queries": counter("vllm:gpu_prefix_cache_queries"),
            "gpu_prefix_hits": counter("vllm:gpu_prefix_cache_hits"),
            "prompt": counter("vllm:prompt_tokens"),
            "generation": counter("vllm:generation_tokens"),
            "ttft": histogram("vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS),
            "tpot": histogram("vllm:time_per_output_token_seconds", VLLM_TPOT_BUCKETS),
            "e2e": histogram("vllm:e2e_request_latency_seconds", VLLM_LATENCY_BUCKETS),
            **(
                {"itl": histogram("vllm:inter_token_latency_seconds", VLLM_TPOT_BUCKETS)}
                if self.itl
                else {}
            ),
        }

    def _sglang(self, registry: CollectorRegistry) -> dict:
        scheduler = ["model_name", "engine_type", "tp_rank", "pp_rank"]

        def gauge(name: str) -> Gauge:
            return Gauge(name, name, scheduler, registry=registry)

        def counter(name: str) -> Counter:
            return Counter(name, name, scheduler, registry=registry)

        def histogram(name: str, buckets) -> Histogram:
            return Histogram(name, name, scheduler, buckets=buckets, registry=registry)

        return {
            "running": gauge("sglang:num_running_reqs"),
            "waiting": gauge("sglang:num_queue_reqs"),
            "kv": gauge("sglang:token_usage"),
            "hit_rate": gauge("sglang:cache_hit_rate"),
            "gen_throughput": gauge("sglang:gen_throughput"),
            "prompt": counter("sglang:prompt_tokens_total"),
            "generation": counter("sglang:generation_tokens_total"),
            "cached": counter("sglang:cached_tokens_total"),
            "ttft": histogram("sglang:time_to_first_token_seconds", SGLANG_TTFT_BUCKETS),
            "itl": histogram("sglang:inter_token_latency_seconds", SGLANG_ITL_BUCKETS),
            "e2e": histogram("sglang:e2e_request_latency_seconds", SGLANG_E2E_BUCKETS),
        }

    def get(self, name: str, engine: int = 0):
        """The labelled child of metric ``name`` (a key of the engine's table)."""
        return self.m[name].labels(**self.labels(engine))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class EngineServer:
    """Serves ``engine``'s exposition on ``/metrics``; ``mode`` ``"ok"``, ``"garbage"`` (an
    HTML page), ``"infinite"`` (a histogram counting +Inf), ``"hang"`` (accepts, then answers
    nothing until :meth:`close`) or ``"trickle"`` (answers, then a byte every 0.1 s until
    :meth:`close`)."""

    def __init__(self, engine: Engine | None = None, mode: str = "ok") -> None:
        self.engine = engine
        self.mode = mode
        self.released = threading.Event()
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()


def _handler(owner: EngineServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            owner.requests += 1
            if owner.mode == "hang":
                owner.released.wait(120)
                return
            if owner.mode == "trickle":  # a comment line, one byte every 0.1 s
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"#")
                while not owner.released.wait(0.1):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                return
            if owner.mode == "garbage":
                body = b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"
            elif owner.mode == "infinite":  # parses, but no bucket count can be +Inf
                body = b'# TYPE h histogram\nh_bucket{le="1"} +Inf\nh_bucket{le="+Inf"} +Inf\n'
            else:
                body = owner.engine.exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler


@contextmanager
def serving(engine: Engine | None = None, mode: str = "ok") -> Iterator[EngineServer]:
    """An :class:`EngineServer`, closed afterwards."""
    server = EngineServer(engine, mode)
    try:
        yield server
    finally:
        server.close()
