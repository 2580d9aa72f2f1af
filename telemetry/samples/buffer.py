"""The process's sample buffer: ``log_sample`` on any thread, drained by the StatsLogger.

``log_sample`` checks its arguments, then holds one short lock to count the sample and,
only if the step keeps it, to redact and truncate it: no I/O, no wait on a sink. At each
commit the StatsLogger drains every stream's window into the step's Snapshot. What other
ranks kept reaches the committing rank's buffer through :meth:`SampleBuffer.absorb`
(:mod:`telemetry.record.gather`) and joins the drain under the same bounds.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence

from telemetry.config import SamplesConfig
from telemetry.model.errors import InvalidValueError
from telemetry.model.sample import Sample, truncate
from telemetry.model.sample_window import Drained, StreamWindow
from telemetry.samples.merge import merge_stream

logger = logging.getLogger(__name__)

Redact = Callable[[dict[str, str]], Mapping[str, str]]
"""A user hook: a sample's text fields in, the fields to send out (same or fewer names)."""


class SampleBuffer:
    """Bounded samples per stream until the next :meth:`drain` (one step).

    Args:
        config: the ``samples`` section (bounds, reward field); default: its defaults.
        redact: applied to a sample's text fields before it is kept (see :data:`Redact`).
        seed: seeds the reservoir's draws (tests); default: from the OS.
    """

    def __init__(
        self,
        config: SamplesConfig | None = None,
        redact: Redact | None = None,
        seed: int | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._config = config or SamplesConfig()
        self._redact = redact
        self._windows: dict[str, StreamWindow] = {}
        self._absorbed: dict[str, Drained] = {}
        self._redact_failing = 0

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (a thread of the parent may have held the old one)
        and no samples of the parent's."""
        self._lock = threading.Lock()
        self._windows = {}
        self._absorbed = {}

    def configure(self, config: SamplesConfig) -> None:
        """Use ``config`` from the next sample on (the StatsLogger's ``samples`` section)."""
        with self._lock:
            self._config = config
            self._windows.clear()
            self._absorbed.clear()

    def set_redact(self, redact: Redact | None) -> None:
        """Apply ``redact`` to every sample kept from now on (None: none)."""
        with self._lock:
            self._redact = redact

    def log(
        self,
        stream: str,
        text: Mapping[str, str] | None = None,
        numbers: Mapping[str, float] | None = None,
    ) -> None:
        """Offer one sample of ``stream`` for this step (see :func:`log_sample`)."""
        text_items, number_items = _checked(stream, text or {}, numbers or {})
        with self._lock:
            config = self._config
            if not config.enabled:
                return
            window = self._windows.get(stream)
            if window is None:
                window = StreamWindow(stream, config.reservoir, config.extremes, self._rng)
                self._windows[stream] = window
            reward = dict(number_items).get(config.reward_key)
            window.offer(
                reward, lambda: self._build(stream, text_items, number_items, config.max_text_bytes)
            )

    def _build(
        self,
        stream: str,
        text: tuple[tuple[str, str], ...],
        numbers: tuple[tuple[str, float], ...],
        max_bytes: int,
    ) -> Sample:
        fields = dict(text)
        if self._redact is not None:
            fields = self._redacted(fields)
        cut, kept = [], []
        for name, value in fields.items():
            value, was_cut = truncate(value, max_bytes)
            kept.append((name, value))
            if was_cut:
                cut.append(name)
        return Sample(stream, tuple(kept), numbers, tuple(cut))

    def _redacted(self, fields: dict[str, str]) -> dict[str, str]:
        """The hook's fields; on a failure of the hook, no text at all (logged once per
        run of failures, with a count when it recovers)."""
        try:
            out = self._redact(dict(fields))
            redacted = {str(k): v for k, v in out.items() if isinstance(v, str)}
        except Exception:
            if not self._redact_failing:
                logger.exception("samples: the redact hook failed; samples keep no text")
            self._redact_failing += 1
            return {}
        if self._redact_failing:
            logger.warning(
                "samples: the redact hook works again after %d failures", self._redact_failing
            )
            self._redact_failing = 0
        return redacted

    def absorb(self, parts: Sequence[Drained]) -> None:
        """Add samples kept elsewhere (other ranks' drains) to this step, under this
        buffer's bounds: the next :meth:`drain` returns them merged with its own."""
        by_stream: dict[str, list[Drained]] = {}
        for part in parts:
            by_stream.setdefault(part.stream, []).append(part)
        with self._lock:
            if not self._config.enabled:
                return
            for stream, group in by_stream.items():
                held = self._absorbed.get(stream)
                self._absorbed[stream] = self._merge(group if held is None else [held, *group])

    def pending(self) -> bool:
        """Whether the next :meth:`drain` returns anything (a stream was offered a sample or
        absorbed one since the last drain)."""
        with self._lock:
            return bool(self._windows or self._absorbed)

    def drain(self) -> tuple[Drained, ...]:
        """Every stream's kept samples and counts since the last drain; starts a new step."""
        with self._lock:
            windows, self._windows = self._windows, {}
            absorbed, self._absorbed = self._absorbed, {}
            out = {stream: window.drain() for stream, window in windows.items()}
            for stream, part in absorbed.items():
                own = out.get(stream)
                out[stream] = part if own is None else self._merge([own, part])
        return tuple(out.values())

    def _merge(self, parts: Sequence[Drained]) -> Drained:
        config = self._config
        return merge_stream(parts, config.reservoir, config.extremes, config.reward_key, self._rng)


def _checked(
    stream: str, text: Mapping[str, str], numbers: Mapping[str, float]
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, float], ...]]:
    """The fields as tuples; a bad argument raises naming it."""
    if not isinstance(stream, str) or not stream:
        raise InvalidValueError(f"log_sample: stream must be a non-empty str, got {stream!r}")
    for name, value in text.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidValueError(
                f"log_sample: text field {name!r} must be a str, got {type(value).__name__}"
            )
    out = []
    for name, value in numbers.items():
        if not isinstance(name, str) or isinstance(value, bool):
            raise InvalidValueError(f"log_sample: numeric field {name!r} must be a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidValueError(
                f"log_sample: numeric field {name!r} must be a number, got {type(value).__name__}"
            ) from None
        if name in text:
            raise InvalidValueError(f"log_sample: field {name!r} is both text and a number")
        out.append((name, number))
    return tuple(text.items()), tuple(out)
