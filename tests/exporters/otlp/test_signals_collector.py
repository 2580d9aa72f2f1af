"""rltel's own OTLP sink to the real rltel collector: a StatsLogger's spans (through
``OtlpSink.span_exporter()``) and samples (``log_sample``) cross a collector outage in its
spool and reach the collector's trace and log consumers in order, nothing lost, beside the
metrics of the same steps."""

from __future__ import annotations

import time
from collections import Counter

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.config import from_dict
from collector.pipeline import Pipeline
from collector.server import CollectorServer
from exporters.base import InMemorySink
from rltel import StatsLogger
from telemetry.otlp.samples import decode_samples
from telemetry.samples import log_sample
from tests.collector.test_signals import Recording
from tests.distributed import free_port

from .spooled import held_under, kind

WAIT_S = 60.0


def signal_entries(directory) -> dict[str, int]:
    """How many trace and logs entries the spool in ``directory`` holds, by count."""
    return Counter(k for part in held_under(directory) if "." in (k := kind(part)))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_spans_and_samples_cross_a_collector_outage_in_order(tmp_path):
    port = free_port()
    spool = tmp_path / "spool"
    stats = StatsLogger(
        {
            "fileroot": str(tmp_path),
            "otlp": {"endpoint": f"127.0.0.1:{port}", "spool_dir": str(spool)},
        }
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(stats.otlp.span_exporter()))
    tracer = provider.get_tracer("test")
    consumer = Recording()
    sink = InMemorySink()
    server = None

    def step(n: int) -> None:
        with tracer.start_as_current_span(f"step-{n}"):
            log_sample("rollout", text={"completion": f"c{n}"}, numbers={"reward": float(n)})
        stats.commit(0, n, n, {"loss": float(n)})

    try:
        for n in range(4):  # nobody listens: spans, metrics and samples go to the spool
            step(n)
        wait_until(
            lambda: signal_entries(spool / "trainer") == {"1.logs": 4, "1.traces": 4},
            "the outage's spans and samples were not spooled",
        )
        config = from_dict({"receiver": {"port": port}})
        server = CollectorServer(
            config,
            Pipeline([sink], None, config.limits),
            trace_consumers=[consumer],
            log_consumers=[consumer],
        )
        server.start()
        for n in range(4, 7):  # and live once the collector is up
            step(n)
        stats.close(WAIT_S)
    finally:
        provider.shutdown()
        if server is not None:
            server.stop(10)
    assert [span.name for span in consumer.spans()] == [f"step-{n}" for n in range(7)]
    received = [got for request in consumer.logs for got in decode_samples(request)]
    assert [(got.step, got.sample.fields()) for got in received] == [
        (n, {"completion": f"c{n}", "reward": float(n)}) for n in range(7)
    ]
    losses = [s.step.global_step for s in sink.snapshots if "loss" in s.flat()]
    assert losses == list(range(7))
    health = stats.otlp.health()
    assert health["spans_exported"] == 7 and health["log_records_exported"] == 7
    assert health["spans_dropped"] == health["log_records_dropped"] == 0
    assert not list((spool / "trainer").glob("*.seg"))
