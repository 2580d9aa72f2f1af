"""Why the collector refuses a metrics request: the reasons it counts and the exceptions the
pipeline raises, which the server answers with a gRPC status.

A refused request was kept nowhere: the sender keeps it and, for a retryable refusal,
sends it again (the server adds a retry delay to ``Overloaded`` and ``Unavailable``).
"""

from __future__ import annotations

__all__ = ["REFUSALS", "Closed", "Expired", "Overloaded", "TooLarge", "Unavailable"]

REFUSALS = ("memory", "queue_full", "heavy", "expired", "too_large", "durable", "sinks_down")
"""The reasons a request is refused, as counted on ``/metrics``."""


class Overloaded(Exception):
    """A sink queue or the memory budget cannot take the request now (retryable).

    ``reason`` is ``"queue_full"`` or ``"memory"``.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class TooLarge(Exception):
    """The request exceeds a per-request bound; retrying it cannot help."""


class Expired(Exception):
    """The sender's deadline passed before the request could be ingested."""


class Closed(Exception):
    """The pipeline is shutting down and accepts nothing more (retryable elsewhere)."""


class Unavailable(Exception):
    """The request's run cannot take data now: one of its sinks failed to start (retryable;
    the sender keeps the data, the collector kept none of it)."""
