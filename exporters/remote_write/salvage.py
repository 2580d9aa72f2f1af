"""A remote-write request refused for some of its samples, sent again in parts.

Prometheus appends a request's samples in one transaction and refuses the whole request
(HTTP 400) at the first sample it will not take: out of order (older than its series' last
sample), out of bounds (older than its head accepts) or a second value at a timestamp it
holds. Every other sample of the request would be lost with it. :class:`Salvage` sends such
a request again in parts: each refused part is halved, the first half sent first, down to
single samples (the request's series, then the samples within each series), so every sample
the receiver takes is taken, in the request's order (each series stays in time order), and
only the samples it refuses alone are dropped and counted.

Any other refusal (a malformed request, a 401) is not per sample: the request is not split.
"""

from __future__ import annotations

from collections.abc import Callable

from exporters.base import ExportResult
from exporters.remote_write import proto

__all__ = ["PER_SAMPLE", "Salvage", "per_sample"]

PER_SAMPLE = ("out of order sample", "out of bounds", "duplicate sample for timestamp")
"""What Prometheus 2.42 answers (HTTP 400) for a request refused for one of its samples."""

Post = Callable[[bytes], tuple[ExportResult, str]]
"""Sends one serialized WriteRequest: ``(result, detail)`` as :func:`client.post`."""


def per_sample(outcome: ExportResult, detail: str) -> bool:
    """Whether ``(outcome, detail)`` of :func:`client.post` is a 400 for a refused sample."""
    if outcome is not ExportResult.PERMANENT_FAILURE or not detail.startswith("HTTP 400:"):
        return False
    body = detail.lower()
    return any(text in body for text in PER_SAMPLE)


class Salvage:
    """The samples of a refused request, sent in halves until each is taken or refused.

    A request of ``N`` samples of which ``r`` are refused costs at most ``2·r·⌈log2 N⌉``
    further requests (a part sent again after a retryable failure comes on top): at each
    halving depth (at most ``⌈log2 N⌉``) at most ``r`` parts are refused, and each refused
    part of more than one sample sends its two halves.

    Args:
        payload: the serialized WriteRequest the receiver refused (:func:`per_sample`).
        detail: the receiver's answer to it.

    Attributes:
        taken: samples the receiver took.
        refused: samples it refused (alone, or in a part refused for another reason).
        requests: requests sent so far.
        detail: the receiver's answer to the last refused part.
    """

    def __init__(self, payload: bytes, detail: str) -> None:
        samples = proto.each_sample(payload)
        self.taken = self.requests = 0
        self.refused = 0 if len(samples) > 1 else len(samples)  # one sample: refused alone
        self.detail = detail
        self._parts = _halves(samples) if len(samples) > 1 else []  # sent from the end

    def send(self, post: Post) -> tuple[ExportResult, str]:
        """Send the parts left, in order.

        Returns:
            ``(FAILURE, detail)`` at the first retryable failure (the part that failed goes
            first at the next call); else ``(SUCCESS, detail)`` once every sample was taken
            or refused.
        """
        while self._parts:
            part = self._parts[-1]
            outcome, detail = post(b"".join(part))
            self.requests += 1
            if outcome is ExportResult.FAILURE:
                return outcome, detail
            self._parts.pop()
            if outcome is ExportResult.SUCCESS:
                self.taken += len(part)
            elif len(part) > 1 and per_sample(outcome, detail):
                self._parts.extend(_halves(part))
            else:
                self.refused += len(part)
                self.detail = detail
        return ExportResult.SUCCESS, self.detail


def _halves(part: list[bytes]) -> list[list[bytes]]:
    """``part``'s two halves, the second first (the parts are sent from the end)."""
    middle = (len(part) + 1) // 2
    return [part[middle:], part[:middle]]
