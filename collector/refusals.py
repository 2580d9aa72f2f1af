"""Why the collector refuses a request: the reasons it counts, and the one exception that
ends an Export call with a gRPC status.

A refused request was kept nowhere: the sender keeps it and, for a retryable refusal, sends it
again after the retry delay the answer carries.
"""

from __future__ import annotations

import grpc

__all__ = ["REFUSALS", "Refused"]

REFUSALS = ("memory", "queue_full", "heavy", "expired", "too_large", "durable", "sinks_down")
"""The reasons a request is refused, as counted on ``/metrics``."""


class Refused(Exception):
    """Ends one Export call with ``code``; nothing of the request was kept.

    Raised by the gate, a service's ``ingest``, the pipeline or a run that cannot take data
    now; the gate answers it.

    A run cannot take data now, for a reason that may clear, when one of its sinks failed to
    start on a file-system error (an unwritable directory, a full disk; the sinks that had
    started were shut down) or its durable queue or rollout merge journal cannot take more:
    :mod:`collector.runs` and :mod:`collector.sinks` raise a retryable ``UNAVAILABLE``, which
    the pipeline counts as ``sinks_down``.

    Args:
        code: the call's gRPC status: ``RESOURCE_EXHAUSTED`` (a queue or the memory budget
            is full), ``INVALID_ARGUMENT`` (over a per-request bound: retrying cannot help),
            ``DEADLINE_EXCEEDED`` (the sender's deadline passed), ``UNAVAILABLE`` (shutting
            down, or a run cannot take data now), ``UNAUTHENTICATED``, ``INTERNAL``.
        message: what the sender reads.
        retry: answer with the retry delay (the sender should send it again later).
    """

    def __init__(self, code: grpc.StatusCode, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retry = retry
