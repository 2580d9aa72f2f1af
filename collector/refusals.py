"""Why the collector refuses a request: the reasons it counts, the one exception that ends
an Export call with a gRPC status, and the one that says a run cannot take data now.

A refused request was kept nowhere: the sender keeps it and, for a retryable refusal, sends it
again after the retry delay the answer carries.
"""

from __future__ import annotations

import grpc

__all__ = ["REFUSALS", "Refused", "RunUnavailable"]

REFUSALS = ("memory", "queue_full", "heavy", "expired", "too_large", "durable", "sinks_down")
"""The reasons a request is refused, as counted on ``/metrics``."""


class Refused(Exception):
    """Ends one Export call with ``code``; nothing of the request was kept.

    Raised by the gate, a service's ``ingest`` or the pipeline; the gate answers it.

    Args:
        code: the call's gRPC status: ``RESOURCE_EXHAUSTED`` (a queue or the memory budget
            is full), ``INVALID_ARGUMENT`` (over a per-request bound: retrying cannot help),
            ``DEADLINE_EXCEEDED`` (the sender's deadline passed), ``UNAVAILABLE`` (shutting
            down, or a sink of the run failed to start), ``UNAUTHENTICATED``, ``INTERNAL``.
        message: what the sender reads.
        retry: answer with the retry delay (the sender should send it again later).
    """

    def __init__(self, code: grpc.StatusCode, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retry = retry


class RunUnavailable(Exception):
    """A run cannot take data now, for a reason that may clear: one of its sinks failed to
    start on a file-system error (an unwritable directory, a full disk; the sinks that had
    started were shut down), or its durable queue or rollout merge journal cannot take more.
    The pipeline refuses the run's data with a retryable ``UNAVAILABLE`` (``sinks_down``)."""
