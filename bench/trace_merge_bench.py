"""The collector's trace merge: what a span costs it, against baselines in the same run.

Requests of ``--spans`` spans (the SDK's batch size, 512), each a step span with three
nested phases per process and step, made by the stock SDK and encoded with its own
``encode_spans``, from ``--processes`` processes of one run, are handed to the consumer the
trace service calls (:class:`collector.traces.TraceMerge`), in the order the processes
would send them (children before their parents), timed on the calling thread:

- ``parse``: ``ExportTraceServiceRequest.FromString`` of each request's bytes, what the
  trace service does before any consumer: the least a consumer could cost;
- ``read``: parse plus :func:`collector.traces.spans.read_spans` (attributes as plain values);
- ``merge``: parse plus ``consume`` with the merged file on and the duration
  histograms off (the file written, whole after each request);
- ``merge+durations``: the same with the duration windows built and delivered (to a list).

Reported: spans per second (median of ``--rounds``), and each one's time as a ratio to
``read``'s (protobuf parses lazily, so ``parse`` alone is no fair baseline: reading the
spans is the least a consumer that looks at them does).

    python bench/trace_merge_bench.py [--spans 512] [--requests 40] [--processes 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from collector.traces import TraceMerge
from collector.traces.config import TracesConfig
from collector.traces.spans import read_spans
from telemetry.model import names, trace_names


class _Batches(SpanExporter):
    """Collects ended spans; ``requests(n)`` encodes them ``n`` to a request, in order."""

    def __init__(self) -> None:
        self.spans: list = []

    def export(self, spans) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def requests(self, size: int) -> list[bytes]:
        return [
            encode_spans(self.spans[i : i + size]).SerializeToString()
            for i in range(0, len(self.spans), size)
        ]

    def shutdown(self) -> None:
        return None


def make_requests(spans: int, requests: int, processes: int) -> list[bytes]:
    batches = _Batches()
    steps = spans * requests // (4 * processes)
    for process in range(processes):
        resource = {
            names.EXPERIMENT: "bench",
            names.TRIAL: "t0",
            names.ROLE: "trainer",
            names.RANK: process,
        }
        provider = TracerProvider(resource=Resource.create(resource), shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(batches))
        tracer = provider.get_tracer("bench")
        for step in range(steps):
            attrs = {trace_names.STEP: step, trace_names.THREAD_ID: 1, "rltel.args.n": 3}
            with tracer.start_as_current_span("step", attributes=attrs):
                for phase in ("rollout", "reward", "train"):
                    with tracer.start_as_current_span(phase, attributes=attrs):
                        pass
    return batches.requests(spans)


def _run(bodies: list[bytes], variant: str, root: Path) -> float:
    """Seconds to hand every request to ``variant``."""
    delivered: list = []
    merge = None
    if variant.startswith("merge"):
        config = TracesConfig(durations=variant == "merge+durations", rotate_steps=10**6)
        merge = TraceMerge(config, lambda e, t: root / e / t, lambda s, at: delivered.append(s))
    start = time.perf_counter()
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        if variant == "read":
            list(read_spans(request))
        elif merge is not None:
            merge.consume(request)
    seconds = time.perf_counter() - start
    if merge is not None:
        merge.shutdown()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bodies = make_requests(args.spans, args.requests, args.processes)
    total = sum(
        len(s.spans)
        for b in bodies
        for r in ExportTraceServiceRequest.FromString(b).resource_spans
        for s in r.scope_spans
    )
    variants = ("parse", "read", "merge", "merge+durations")
    seconds: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for variant in variants:
                seconds[variant].append(_run(bodies, variant, Path(tmp) / f"{variant}{round_}"))
    shape = f"{len(bodies)} requests, {total} spans, {args.processes} processes"
    print(f"{shape}, median of {args.rounds}")
    base = statistics.median(seconds["read"])
    for variant in variants:
        median = statistics.median(seconds[variant])
        print(f"{variant:>16}: {total / median:>10,.0f} spans/s  {median / base:5.2f}x read")


if __name__ == "__main__":
    main()
