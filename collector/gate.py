"""What every Export call passes before its body is read: the bearer token, the sender's
deadline, the heavy-request gate and the memory budget; and how a call ends with a status.

One gate serves the metrics, trace and logs services alike (:class:`RequestGate`); the
service's own ``ingest`` runs inside it, holding the parse's share of the memory budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc.error_details_pb2 import RetryInfo

from collector.admission import PARSE_EXPANSION
from collector.auth import allows_call
from collector.pipeline import Pipeline
from collector.refusals import Refused
from exporters.bearer import BearerCheck
from telemetry.otlp.wire import PUSHBACK_KEY, RETRY_INFO_KEY

__all__ = ["RequestGate", "retry_metadata"]

Ingest = Callable[..., Message]
"""``(data, expired, heavy, hold) -> response``: a service's work on one body."""


def retry_metadata(delay_s: float) -> tuple[tuple[str, str | bytes], ...]:
    """Trailing metadata asking the sender to retry after ``delay_s``."""
    delay = Duration()
    delay.FromNanoseconds(int(delay_s * 1e9))
    info = RetryInfo(retry_delay=delay).SerializeToString()
    return ((PUSHBACK_KEY, str(int(delay_s * 1000))), (RETRY_INFO_KEY, info))


class RequestGate:
    """The checks in front of every Export, in order: token, deadline, heavy, memory.

    Args:
        auth: the bearer-token check; None when no token is configured.
        pipeline: whose limits, memory budget and refusal counters the gate uses.
        heavy: the heavy-request gate, ``limits.max_heavy_requests`` slots taken without
            waiting (``acquire(blocking=False)``), shared with the services.
    """

    def __init__(
        self, auth: BearerCheck | None, pipeline: Pipeline, heavy: threading.Semaphore
    ) -> None:
        self.auth = auth
        self.pipeline = pipeline
        self.heavy = heavy

    def serve(
        self, data: bytes, context: Any, ingest: Ingest, tally: Callable[[str, int], None]
    ) -> Message:
        """Run ``ingest`` behind the gate; count the call's status and size in ``tally``.

        A :class:`Refused` raised by the gate or ``ingest`` ends the call with its status,
        and with the retry delay (``limits.retry_after_s``) when it is retryable.
        """
        try:
            response = self._handle(data, context, ingest)
        except Refused as refused:
            if refused.retry:
                delay_s = self.pipeline.limits.retry_after_s
                context.set_trailing_metadata(retry_metadata(delay_s))
            tally(refused.code.name, len(data))
            context.abort(refused.code, str(refused))
        tally("OK", len(data))
        return response

    def refuse_heavy(self, message: str) -> Refused:
        """Count a refusal for too many large requests at once; the exception to raise."""
        self.pipeline.count_refusal("heavy")
        return Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry=True)

    def _handle(self, data: bytes, context: Any, ingest: Ingest) -> Message:
        if self.auth is not None and not allows_call(
            self.auth, context.invocation_metadata(), context.peer()
        ):
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        expired = self._expired(context)
        if expired():
            self.pipeline.count_refusal("expired")
            raise Refused(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before decoding")
        heavy = len(data) > self.pipeline.limits.heavy_request_bytes
        if heavy and not self.heavy.acquire(blocking=False):
            raise self.refuse_heavy("too many large requests at once")
        try:
            hold = self.pipeline.budget.hold(len(data) * PARSE_EXPANSION)
            if hold is None:
                self.pipeline.count_refusal("memory")
                raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "memory budget full", True)
            try:
                return ingest(data, expired, heavy, hold)
            finally:
                hold.done()
        finally:
            if heavy:
                self.heavy.release()

    def _expired(self, context: Any) -> Callable[[], bool]:
        """``() -> True`` once too little of the sender's deadline is left to answer."""
        remaining = context.time_remaining()
        if remaining is None:
            return lambda: False
        end = time.monotonic() + remaining - self.pipeline.limits.deadline_margin_s
        return lambda: time.monotonic() >= end
