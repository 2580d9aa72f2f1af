"""The one retry loop of rltel's delivery paths.

:func:`retry` tries, and after an answer worth another try waits a doubling backoff (at
least the delay the receiver asked for, its retry pushback) and tries again, until an
answer is final, the retries run out, or the caller's ``pause`` says stop. What to do with
the last answer is the caller's. It runs the queue in front of every sink
(:mod:`exporters.queue_worker`), ``rltel spool flush`` (:mod:`exporters.otlp.flush`), the trace
forwarder (:mod:`collector.traces.forward`) and the remote-write sender
(:mod:`exporters.remote_write.sink`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Backoff", "retry"]

A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Backoff:
    """The delays between tries: ``first_s``, doubling per retry up to ``max_s``.

    Attributes:
        first_s: the first retry's delay.
        max_s: the longest delay between two tries (a longer pushback is still honoured).
        jitter: each delay is drawn from [delay / 2, delay] (many senders, one receiver).
    """

    first_s: float
    max_s: float
    jitter: bool = False

    def wait_s(self, delay_s: float, pushback_s: float | None) -> float:
        """How long to wait at ``delay_s``: jittered, and at least ``pushback_s``."""
        if self.jitter:
            delay_s *= random.uniform(0.5, 1.0)
        return delay_s if pushback_s is None else max(delay_s, pushback_s)

    def after(self, delay_s: float) -> float:
        """The delay after ``delay_s``."""
        return min(delay_s * 2, self.max_s)


def _no_pushback(answer: object) -> None:
    del answer


def retry(
    attempt: Callable[[], A],
    again: Callable[[A], bool],
    pause: Callable[[A, float], bool],
    backoff: Backoff,
    *,
    max_retries: int | None = None,
    pushback: Callable[[A], float | None] = _no_pushback,
) -> A:
    """Call ``attempt`` until its answer is final; return the last answer.

    Args:
        attempt: one try; its answer, never an exception it could catch.
        again: whether an answer is worth another try.
        pause: called with such an answer and the seconds to wait before the next try; it
            waits (and counts, logs...) and returns whether to try again.
        backoff: the delays.
        max_retries: retries at most (None: until ``pause`` returns False).
        pushback: the delay the receiver asked for with ``answer``, if it did.
    """
    delay_s, retries = backoff.first_s, 0
    while True:
        answer = attempt()
        if not again(answer) or (max_retries is not None and retries >= max_retries):
            return answer
        if not pause(answer, backoff.wait_s(delay_s, pushback(answer))):
            return answer
        delay_s, retries = backoff.after(delay_s), retries + 1
