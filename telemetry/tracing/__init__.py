"""Traces of a training or rollout process: AReaL's ``perf_tracer`` as OpenTelemetry spans.

Each process configures one tracer (:func:`configure`, or the StatsLogger's ``tracing``
section); its scopes, instants, ``record_timing`` scopes and rollout sessions become spans of
the OpenTelemetry SDK (a provider of its own, never the global one), sampled at a configured
rate, exported on the SDK's batch thread to the per-rank Chrome trace file (embedded) or the
OTLP sink (collector). Not configured, every call is a no-op and the SDK is not imported.
"""

from __future__ import annotations

from telemetry.tracing.api import (
    atrace_scope,
    configure,
    get_session_tracer,
    get_tracer,
    instant,
    is_configured,
    reset,
    save,
    trace_perf,
    trace_scope,
)
from telemetry.tracing.categories import (
    Category,
    CategoryLike,
    PerfTraceCategory,
    SessionTraceEvent,
)
from telemetry.tracing.session_api import (
    atrace_session_phase,
    get_session_id,
    get_task_id,
    register_session,
    register_task,
    session_context,
    set_session_id,
    set_task_id,
    trace_session,
    trace_session_event,
    trace_session_phase,
)
from telemetry.tracing.sessions import SessionTracer
from telemetry.tracing.tracer import PerfTracer

__all__ = [
    "Category",
    "CategoryLike",
    "PerfTraceCategory",
    "PerfTracer",
    "SessionTraceEvent",
    "SessionTracer",
    "atrace_scope",
    "atrace_session_phase",
    "configure",
    "get_session_id",
    "get_session_tracer",
    "get_task_id",
    "get_tracer",
    "instant",
    "is_configured",
    "register_session",
    "register_task",
    "reset",
    "save",
    "session_context",
    "set_session_id",
    "set_task_id",
    "trace_perf",
    "trace_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]
