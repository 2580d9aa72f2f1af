"""Span attribute names rltel's tracer writes and the collector reads: one place for both.

A span's process is named by its resource (``rltel.rank``, ``rltel.role``, ``rltel.experiment``,
``rltel.trial`` from :mod:`telemetry.model.names`); the names below are per span.
"""

CATEGORY = "rltel.category"  # AReaL's category (compute, comm, io, ..., timeperf, session)
STEP = "rltel.step"  # the global step: the scope's args["global_step"] or an enclosing one's
INSTANT = "rltel.instant"  # true on a zero-length span that stands for an instant event
ARGS_PREFIX = "rltel.args."  # + each key of the call's args (values as int/float/bool/str)
THREAD_ID = "thread.id"  # OpenTelemetry's semantic convention: the native thread id
THREAD_NAME = "thread.name"
TIMING_CATEGORY = "timeperf"  # the category of a ``record_timing`` scope's span
SESSION_CATEGORY = "session"  # a rollout session's span and its phases' (args: session_id,
# task_id; the session's own span also status and reason)

__all__ = [
    "ARGS_PREFIX",
    "CATEGORY",
    "INSTANT",
    "SESSION_CATEGORY",
    "STEP",
    "THREAD_ID",
    "THREAD_NAME",
    "TIMING_CATEGORY",
]
