"""The ``collector.traces`` section: the merged timeline per run, its rotation, the span
duration histograms and forwarding to an OTLP trace endpoint.

The trace merge's own section, in its folder (:mod:`collector.config` holds it as
``traces``); the consumer is :mod:`collector.traces`.
"""

from __future__ import annotations

import itertools
from dataclasses import field

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA, OtlpTlsConfig
from telemetry.config.read import FieldRule, check_endpoint

__all__ = ["DEFAULT_DURATION_BUCKETS", "TraceForwardConfig", "TracesConfig"]

DEFAULT_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: from a sub-millisecond tool call to a long generation or weight sync."""


@dataclass(frozen=True, config=SCHEMA)
class TraceForwardConfig:
    """Forwarding of every accepted trace request to an OTLP/gRPC trace endpoint (Jaeger,
    Tempo, an OpenTelemetry Collector); off without ``endpoint``.

    Attributes:
        endpoint: ``host:port`` (or ``http(s)://host:port``) of the receiver's OTLP/gRPC
            port (Jaeger and Tempo: 4317).
        insecure: plaintext gRPC (ignored when ``tls`` names a file).
        tls: the CA to trust and a client certificate, as the StatsLogger's ``otlp.tls``.
        headers: metadata sent with every request (``authorization``: a token).
        queue_size: requests waiting at most; one more is dropped and counted.
        timeout_s: one export call's deadline.
        max_retries: retries of a request answered with a retryable status (or none).
        backoff_s: the first retry's delay; doubles per retry up to 5 s; at least the
            delay the receiver asked for (gRPC retry pushback).
    """

    endpoint: StrictStr | None = None
    insecure: StrictBool = True
    tls: OtlpTlsConfig = field(default_factory=OtlpTlsConfig)
    headers: dict[StrictStr, StrictStr] = field(default_factory=dict)
    queue_size: StrictInt = Field(default=256, ge=1)
    timeout_s: StrictFloat = Field(default=10.0, gt=0)
    max_retries: StrictInt = Field(default=5, ge=0)
    backoff_s: StrictFloat = Field(default=0.2, gt=0)

    @property
    def enabled(self) -> bool:
        """True when an endpoint is set."""
        return bool(self.endpoint)

    def __post_init__(self) -> None:
        if self.endpoint is not None:
            check_endpoint("endpoint", self.endpoint)
        for name in self.headers:
            if name != name.lower():
                raise FieldRule("headers", f"{name!r}: gRPC metadata keys are lower case")


@dataclass(frozen=True, config=SCHEMA)
class TracesConfig:
    """What the collector does with the spans it accepts.

    Attributes:
        merged_file: write each run's spans, every rank and worker, into one Chrome trace
            event file ``<run dir>/trace.json`` (Perfetto, ``chrome://tracing``).
        rotate_steps: a part of the file holds spans of this many training steps; when a
            span of a later step arrives, ``trace.json`` is finished and renamed
            ``trace.steps-<first>-<last>.json`` (steps zero-padded to 8 digits) and a new
            ``trace.json`` begins.
        hold_s: a span waits this long at most for its trace's root span (a parent ends
            after its children) before it is written without it (checked whenever spans
            arrive, at the durable queue's flushes, and at shutdown).
        max_pending_spans: spans waiting for their root, per run, at most; past it the
            oldest traces are written as they are.
        durations: per phase (span name) and role, a span duration histogram
            (``rltel_span_duration_seconds{phase,role}``) into the run's metrics.
        duration_buckets: its bucket bounds in seconds, increasing.
        forward: forwarding to an OTLP trace endpoint.
    """

    merged_file: StrictBool = True
    rotate_steps: StrictInt = Field(default=100, ge=1)
    hold_s: StrictFloat = Field(default=30.0, gt=0)
    max_pending_spans: StrictInt = Field(default=50_000, ge=1)
    durations: StrictBool = True
    duration_buckets: tuple[StrictFloat, ...] = DEFAULT_DURATION_BUCKETS
    forward: TraceForwardConfig = field(default_factory=TraceForwardConfig)

    def __post_init__(self) -> None:
        bounds = self.duration_buckets
        if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
            raise FieldRule("duration_buckets", f"must be increasing and non-empty, got {bounds}")
