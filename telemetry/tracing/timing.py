"""Each ``record_timing`` scope as a span: a listener on :mod:`telemetry.record.phase`.

``record_timing(key)`` announces its entry and exit to the phase listeners on the thread
(and asyncio task) that runs it; :class:`TimingSpans` opens a span ``timeperf/<key>``
(category ``timeperf``) at entry, current inside the scope so that ``trace_scope`` spans
opened there nest under it, and ends it at exit. Open spans are kept per context (a
``ContextVar``), so interleaved tasks on one thread keep their own. Registered only while a
tracer is configured with ``record_timing`` on: with tracing off, ``record_timing`` does
what it did before. A failure here is logged once and never reaches the training loop.
"""

from __future__ import annotations

import contextvars
import logging

from telemetry.model import trace_names
from telemetry.record import phase
from telemetry.tracing.recorder import Recorder, SpanScope

__all__ = ["TimingSpans"]

logger = logging.getLogger(__name__)

_open: contextvars.ContextVar[tuple[tuple[str, SpanScope], ...]] = contextvars.ContextVar(
    "rltel_timing_spans", default=()
)


class TimingSpans:
    """Spans for ``record_timing`` scopes while :meth:`start`-ed (see the module doc)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.failures = 0

    def start(self) -> None:
        """Listen to ``record_timing`` entries and exits."""
        phase.add_listener(self.on_phase)

    def stop(self) -> None:
        """Stop listening (scopes still open end unrecorded)."""
        phase.remove_listener(self.on_phase)

    def on_phase(self, name: str, entering: bool) -> None:
        """Open or end the span of ``record_timing(name)``."""
        try:
            if entering:
                scope = self._recorder.scope(
                    f"{trace_names.TIMING_CATEGORY}/{name}", trace_names.TIMING_CATEGORY, None
                )
                scope.__enter__()
                _open.set((*_open.get(), (name, scope)))
                return
            stack = _open.get()
            for index in range(len(stack) - 1, -1, -1):
                if stack[index][0] == name:
                    _open.set(stack[:index] + stack[index + 1 :])
                    stack[index][1].__exit__(None, None, None)
                    return
        except Exception as exc:
            self.failures += 1
            if self.failures == 1:
                logger.warning("perf_tracer: record_timing span failed (%r); counting", exc)
