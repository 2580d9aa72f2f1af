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
from typing import TypeVar

__all__ = ["retry"]

A = TypeVar("A")


def _no_pushback(answer: object) -> None:
    del answer


def retry(
    attempt: Callable[[], A],
    again: Callable[[A], bool],
    pause: Callable[[A, float], bool],
    *,
    backoff_s: float,
    max_backoff_s: float,
    jitter: bool = False,
    max_retries: int | None = None,
    pushback: Callable[[A], float | None] = _no_pushback,
) -> A:
    """Call ``attempt`` until its answer is final; return the last answer.

    Args:
        attempt: one try; its answer, never an exception it could catch.
        again: whether an answer is worth another try.
        pause: called with such an answer and the seconds to wait before the next try; it
            waits (and counts, logs...) and returns whether to try again.
        backoff_s: the first retry's delay; it doubles per retry up to ``max_backoff_s``.
        max_backoff_s: the longest delay between two tries (a longer pushback is still
            honoured).
        jitter: each delay is drawn from [delay / 2, delay] (many senders, one receiver).
        max_retries: retries at most (None: until ``pause`` returns False).
        pushback: the delay the receiver asked for with ``answer``, if it did: the wait is
            at least that long.
    """
    delay_s, retries = backoff_s, 0
    while True:
        answer = attempt()
        if not again(answer) or (max_retries is not None and retries >= max_retries):
            return answer
        asked_s = pushback(answer)
        wait_s = delay_s * random.uniform(0.5, 1.0) if jitter else delay_s
        if not pause(answer, wait_s if asked_s is None else max(wait_s, asked_s)):
            return answer
        delay_s, retries = min(delay_s * 2, max_backoff_s), retries + 1
