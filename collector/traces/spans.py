"""OTLP spans as plain values: who made each span (run, role, rank or worker) and what it is.

The run is the metrics' run identity: the resource's ``rltel.experiment``/``rltel.trial``
(:mod:`telemetry.model.names`). The process is the resource's ``rltel.role`` and
``rltel.rank`` (a rollout worker: ``rltel.worker_id``).
A span's step, category, thread and arguments are the attributes
:mod:`telemetry.model.trace_names` names (``rltel.step``, ``rltel.category``, ``thread.id``,
``thread.name``, ``rltel.args.<key>``); a span marked ``rltel.instant`` is an instant event.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from telemetry.config import LabelLimits
from telemetry.model import names, trace_names
from telemetry.model.run import RunKey
from telemetry.otlp.values import UNLIMITED, Rejected, attributes

__all__ = ["Process", "SpanView", "read_spans"]

OWN_KEYS = frozenset(
    {
        trace_names.STEP,
        trace_names.CATEGORY,
        trace_names.INSTANT,
        trace_names.THREAD_ID,
        trace_names.THREAD_NAME,
    }
)
STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR
PARENT_IS_REMOTE = 0x300  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | ..._IS_REMOTE_MASK


@dataclass(frozen=True, slots=True)
class Process:
    """One process of a run on the timeline: a trainer rank or a rollout worker."""

    role: str
    rank: int | None = None
    worker: str | None = None

    @property
    def label(self) -> str:
        """``trainer rank 0``, ``rollout worker 1``, ``eval``."""
        if self.worker is not None:
            return f"{self.role} worker {self.worker}"
        if self.rank is not None:
            return f"{self.role} rank {self.rank}"
        return self.role


@dataclass(frozen=True, slots=True)
class SpanView:
    """One span with what the timeline and the duration histograms read from it."""

    run: RunKey
    process: Process
    name: str
    trace_id: bytes
    span_id: bytes
    parent_id: bytes
    parent_remote: bool
    start_ns: int
    end_ns: int
    thread: int
    thread_name: str | None
    step: int | None
    category: str
    instant: bool
    args: tuple[tuple[str, object], ...]
    """The call's ``args`` (``rltel.args.`` taken off) and any other attribute, as sent."""
    instants: tuple[tuple[str, int, tuple[tuple[str, object], ...]], ...]
    """The span's events: ``(name, time_unix_nano, attributes)``."""
    error: str | None

    @property
    def local_root(self) -> bool:
        """No parent in this process: the span its trace's other local spans end before."""
        return not self.parent_id or self.parent_remote

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


def _int(value: object | None) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _process(resource: dict[str, object]) -> Process:
    role = str(resource.get(names.ROLE, "trainer"))
    worker = resource.get(names.WORKER_ID)
    if worker is not None:
        return Process(role, None, str(worker))
    return Process(role, _int(resource.get(names.RANK)), None)


def read_spans(
    request: ExportTraceServiceRequest, limits: LabelLimits = UNLIMITED
) -> Iterator[SpanView | Rejected]:
    """Every span of ``request`` that names a run, or the :class:`Rejected` reason why one
    cannot be read (an attribute over ``limits``); spans of resources without a run are
    skipped."""
    for resource_spans in request.resource_spans:
        try:
            resource = dict(reversed(attributes(resource_spans.resource.attributes, limits)))
        except Rejected as exc:
            yield exc
            continue
        experiment = resource.get(names.EXPERIMENT)
        if experiment is None:
            continue
        run = (str(experiment), str(resource.get(names.TRIAL, "default")))
        process = _process(resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                try:
                    yield _view(run, process, span, limits)
                except Rejected as exc:
                    yield exc


def _view(run: RunKey, process: Process, span, limits) -> SpanView:
    found = dict(reversed(attributes(span.attributes, limits)))
    prefix = trace_names.ARGS_PREFIX
    args = tuple(
        (key.removeprefix(prefix), value) for key, value in found.items() if key not in OWN_KEYS
    )
    thread_name = found.get(trace_names.THREAD_NAME)
    instants = tuple(
        (event.name, event.time_unix_nano, attributes(event.attributes, limits))
        for event in span.events
    )
    error = None
    if span.status.code == STATUS_ERROR:
        error = span.status.message or "error"
    return SpanView(
        run=run,
        process=process,
        name=span.name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_span_id,
        parent_remote=span.flags & PARENT_IS_REMOTE == PARENT_IS_REMOTE,
        start_ns=span.start_time_unix_nano,
        end_ns=max(span.end_time_unix_nano, span.start_time_unix_nano),
        thread=_int(found.get(trace_names.THREAD_ID)) or 0,
        thread_name=None if thread_name is None else str(thread_name),
        step=_int(found.get(trace_names.STEP)),
        category=str(found.get(trace_names.CATEGORY, "")),
        instant=found.get(trace_names.INSTANT) is True,
        args=args,
        instants=instants,
        error=error,
    )
