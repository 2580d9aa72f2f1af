"""One run's rollout samples from their arrival to their step's release (the collector).

A :class:`RunSamples` holds one bounded window per training step and sample stream until
the step is released to the run's step-based sinks as one
:class:`~telemetry.model.snapshot.Snapshot` of stream :data:`SAMPLES_STREAM` whose
``samples`` are the step's, at the step's ``global_step`` (:mod:`collector.samples` says
when). Each window keeps the embedded bound (the ``samples`` section, as the StatsLogger's):
the exact lowest and highest ``extremes`` rewards and a uniform reservoir of the others, at
most ``reservoir + 2 * extremes`` samples whatever the senders send, each text field cut at
``max_text_bytes``. A sender's kept set that fits the bound passes whole.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from telemetry.config import SamplesConfig
from telemetry.model import names
from telemetry.model.sample import Sample, truncate
from telemetry.model.sample_window import Drained, StreamWindow
from telemetry.model.snapshot import Attributes, Snapshot, Step
from telemetry.otlp.samples import ReceivedSample

logger = logging.getLogger(__name__)

SAMPLES_STREAM = "samples"
"""The stream of a released step's samples (W&B plots them against ``samples/step``)."""
WAITING_STREAMS = ("rollout", "eval")
"""Senders whose samples wait for the next training step (the rollout merge's streams)."""
MAX_HELD_STEPS = 64
"""Steps a run holds at most; past it the oldest is released."""
MAX_STREAMS = 64
"""Sample streams per step at most; samples of more are dropped and counted."""
MAX_PARTS = 4096
"""Senders' parts (resource, snapshot time, step) remembered to skip a retried one."""


@dataclass(slots=True)
class _Step:
    """One step's windows, by sample stream."""

    windows: dict[str, StreamWindow] = field(default_factory=dict)
    latest_ns: int = 0


class RunSamples:
    """One run's samples from arrival to release (thread-safe).

    Args:
        config: the bounds (``reservoir``, ``extremes``, ``max_text_bytes``, ``reward_key``).
        resource: the run's resource attributes (experiment, trial) for released snapshots.
        train: the last training step the run routed before this (None: none yet).
        seed: seeds the reservoirs (tests).
    """

    def __init__(
        self,
        config: SamplesConfig,
        resource: Attributes,
        train: Step | None = None,
        seed: int | None = None,
    ) -> None:
        self._config = config
        self._resource = resource
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._waiting = _Step()  # rollout/eval samples until the next training step
        self._steps: dict[int, _Step] = {}
        self._train = train  # the last training step routed
        self._known: dict[int, Step] = {} if train is None else {train.global_step: train}
        self._parts: OrderedDict[tuple, None] = OrderedDict()
        self._replayed = False  # the waiting samples came from an earlier process's journal
        self.dropped = self.duplicates = 0

    def fresh(self, part: tuple) -> bool:
        """Whether ``part`` (a sender's resource, its snapshot's time and step) is new; a retried
        logs request's is not: its samples are skipped and counted in :attr:`duplicates`."""
        with self._lock:
            if part in self._parts:
                self.duplicates += 1
                return False
            self._parts[part] = None
            if len(self._parts) > MAX_PARTS:
                self._parts.popitem(last=False)
            return True

    def add(self, received: ReceivedSample, replayed: bool = False) -> list[Snapshot]:
        """Keep ``received`` in its step's window; the steps its arrival releases.

        ``replayed``: it comes from an earlier process's logs journal, whose order stands
        for the training steps it did not journal: waiting samples replayed belong to the
        next trainer's sample or training step that comes (replayed or not).
        """
        origin = str(dict(received.resource).get(names.STREAM, "train"))
        with self._lock:
            if origin in WAITING_STREAMS or received.step is None:
                held = self._waiting
                self._replayed = self._replayed or replayed
            else:
                if self._replayed:
                    self._assign_waiting(received.step)
                held = self._steps.setdefault(received.step, _Step())
            self._offer(held, received)
            if len(self._steps) > MAX_HELD_STEPS:
                return self._release(min(self._steps))
        return []

    def close_step(self, step: int) -> list[Snapshot]:
        """A trainer's samples of ``step`` have all arrived: release it and every step before."""
        with self._lock:
            return self._release(step)

    def on_train(self, step: Step) -> list[Snapshot]:
        """A training step was routed: the steps before it (to queue before it), and the
        waiting rollout/eval samples now belong to it."""
        with self._lock:
            if self._train is not None and step.global_step <= self._train.global_step:
                return []
            self._train = step
            self._known[step.global_step] = step
            while len(self._known) > MAX_HELD_STEPS:
                del self._known[min(self._known)]
            out = self._release(step.global_step - 1)
            self._assign_waiting(step.global_step)
            return out

    def flush(self) -> list[Snapshot]:
        """Everything held, the waiting samples at the last training step (at shutdown)."""
        with self._lock:
            self._assign_waiting(self._train.global_step if self._train is not None else 0)
            return self._release(max(self._steps, default=0))

    @property
    def holding(self) -> bool:
        """Whether any sample waits for its step."""
        with self._lock:
            return bool(self._steps or self._waiting.windows)

    def _assign_waiting(self, step: int) -> None:
        """The waiting samples belong to ``step`` now."""
        self._replayed = False
        if not self._waiting.windows:
            return
        held = self._steps.setdefault(step, _Step())
        for stream, window in self._waiting.windows.items():
            self._merge_into(held, stream, window)
        held.latest_ns = max(held.latest_ns, self._waiting.latest_ns)
        self._waiting = _Step()

    def _offer(self, held: _Step, received: ReceivedSample) -> None:
        config, sample = self._config, received.sample
        window = held.windows.get(sample.stream)
        if window is None:
            if len(held.windows) >= MAX_STREAMS:
                self.dropped += 1
                if self.dropped == 1:
                    logger.warning(
                        "samples: a step has %d streams; samples of more are dropped (counted)",
                        MAX_STREAMS,
                    )
                return
            window = held.windows[sample.stream] = self._window(sample.stream)
        held.latest_ns = max(held.latest_ns, received.time_unix_nano)
        reward = sample.number(config.reward_key)
        window.offer(reward, lambda: _cut(sample, config.max_text_bytes))

    def _window(self, stream: str) -> StreamWindow:
        """A window whose reservoir can hold a whole kept set of one sender (trimmed to the
        bound on release)."""
        config = self._config
        return StreamWindow(
            stream, config.reservoir + 2 * config.extremes, config.extremes, self._rng
        )

    def _merge_into(self, held: _Step, stream: str, window: StreamWindow) -> None:
        target = held.windows.get(stream)
        if target is None:
            held.windows[stream] = window
            return
        reward_key = self._config.reward_key
        for sample in window.drain().samples:
            target.offer(sample.number(reward_key), lambda s=sample: s)

    def _release(self, upto: int) -> list[Snapshot]:
        out = []
        for step in sorted(s for s in self._steps if s <= upto):
            held = self._steps.pop(step)
            kept: list[Sample] = []
            for window in held.windows.values():
                kept.extend(self._trim(window.drain()))
            if kept:
                out.append(self._snapshot(step, held.latest_ns, tuple(kept)))
        return out

    def _trim(self, drained: Drained) -> list[Sample]:
        """The exact extremes plus at most ``reservoir`` of the others, drawn uniformly from
        the window's reservoir; in arrival order."""
        config = self._config
        rated = sorted(
            (reward, i)
            for i, sample in enumerate(drained.samples)
            if (reward := sample.number(config.reward_key)) is not None and reward == reward
        )
        k = config.extremes
        extremes = {i for _, i in rated[:k] + rated[-k:]} if k else set()
        others = [i for i in drained.uniform if i not in extremes]
        if len(others) > config.reservoir:
            others = self._rng.sample(others, config.reservoir)
        return [drained.samples[i] for i in sorted(extremes | set(others))]

    def _snapshot(self, step: int, latest_ns: int, samples: tuple[Sample, ...]) -> Snapshot:
        known = self._known.get(step) or Step(0, 0, step)  # a step no trainer sent yet
        resource = (*self._resource, (names.STREAM, SAMPLES_STREAM))
        return Snapshot((), known, resource, latest_ns or time.time_ns(), SAMPLES_STREAM, samples)


def _cut(sample: Sample, max_bytes: int) -> Sample:
    """``sample`` with every text field cut at ``max_bytes`` (a sender's longer text)."""
    text, cut = [], list(sample.truncated)
    for name, value in sample.text:
        value, was_cut = truncate(value, max_bytes)
        text.append((name, value))
        if was_cut and name not in cut:
            cut.append(name)
    if not cut and tuple(text) == sample.text:
        return sample
    return Sample(sample.stream, tuple(text), sample.numbers, tuple(cut))
