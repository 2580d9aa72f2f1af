"""Bounded samples of rollouts: what the policy generates, next to the metrics.

Call :func:`log_sample` from a rollout workflow once a sample's reward is known; at each
commit the StatsLogger takes, per stream, a uniform reservoir plus the lowest- and
highest-reward samples (``stats_logger.samples``), redacted by :func:`set_redact`'s hook
and cut at the text limit, and hands them to its sinks with the counts
``samples/<stream>/seen``, ``.../kept`` and ``.../truncated``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from telemetry.model.sample import TRUNCATION_MARK, Sample
from telemetry.model.sample_window import Drained
from telemetry.samples.buffer import Redact, SampleBuffer

__all__ = [
    "TRUNCATION_MARK",
    "Drained",
    "Redact",
    "Sample",
    "SampleBuffer",
    "default_buffer",
    "log_sample",
    "set_redact",
]

_DEFAULT = SampleBuffer()
os.register_at_fork(after_in_child=_DEFAULT.after_fork)


def default_buffer() -> SampleBuffer:
    """The process's buffer, which :func:`log_sample` fills and the StatsLogger drains."""
    return _DEFAULT


def log_sample(
    stream: str = "rollout",
    text: Mapping[str, str] | None = None,
    numbers: Mapping[str, float] | None = None,
) -> None:
    """Offer one sample to this step's bounded set of ``stream``; cheap, no I/O.

    Args:
        stream: ``rollout``, ``eval-rollout`` or any name of the user's.
        text: text fields, e.g. ``{"prompt": p, "completion": c}``.
        numbers: numeric fields (Python numbers: a tensor would be read on this thread),
            e.g. ``{"reward": 1.0, "length": 12}``; ``reward`` orders the extremes.

    Raises:
        InvalidValueError: a field is of the wrong type (names the field), or the stream
            is not a non-empty str.
    """
    _DEFAULT.log(stream, text, numbers)


def set_redact(redact: Redact | None) -> None:
    """Apply ``redact`` to the text fields of every sample kept from now on; it gets a
    dict of the fields and returns those to keep (None: no hook). A hook that raises
    leaves the sample without text (logged once per run of failures)."""
    _DEFAULT.set_redact(redact)
