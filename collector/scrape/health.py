"""Each scrape target's health: its ``up`` gauge, failures by reason, and one log line per change.

A prometheus_client custom collector (register it on the Prometheus sink's registry),
families built on every scrape of the collector:

- ``rltel_scrape_up{target,instance,experiment,trial,role}``: 1 when the last scrape
  succeeded, else 0 (as Prometheus's own ``up``);
- ``rltel_scrape_duration_seconds{...}``: how long the last scrape took;
- ``rltel_scrape_series{...}``: series in the last successful scrape;
- ``rltel_scrape_failures_total{...,reason}``: failed scrapes by reason (:data:`REASONS`);
- ``rltel_scrape_dropped_total{...}``: scrapes the pipeline could not queue (memory or queues);
- ``rltel_scrape_targets_file_errors_total``: versions of the targets file that were refused.

A target that keeps failing logs once when it goes down (with the reason) and once when it
is back (with the number of failed scrapes in between), never once per scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

from collector.scrape.config import ScrapeTarget
from exporters.prometheus.families import Family, describe

__all__ = ["REASONS", "ScrapeHealth"]

logger = logging.getLogger(__name__)

PREFIX = "rltel_scrape_"
REASONS = ("down", "status", "timeout", "too_large", "bad_text")
"""``down``: no connection; ``status``: an HTTP status other than 200; ``timeout``: past
``scrape.timeout_s``; ``too_large``: past ``scrape.max_body_bytes``; ``bad_text``: not the
Prometheus text format."""

_LABELS = ("target", "instance", "experiment", "trial", "role")
_UP, _DURATION, _SERIES, _FAILURES, _DROPPED, _FILE_ERRORS = _DECLARED = (
    Family(f"{PREFIX}up", "gauge", "1 if the last scrape succeeded", _LABELS),
    Family(f"{PREFIX}duration_seconds", "gauge", "seconds the last scrape took", _LABELS),
    Family(f"{PREFIX}series", "gauge", "series in the last successful scrape", _LABELS),
    Family(f"{PREFIX}failures", "counter", "failed scrapes by reason", (*_LABELS, "reason")),
    Family(f"{PREFIX}dropped", "counter", "scrapes the pipeline could not queue", _LABELS),
    Family(f"{PREFIX}targets_file_errors", "counter", "targets file versions refused"),
)


@dataclass(slots=True)
class _State:
    labels: tuple[str, ...]
    up: int = 0
    duration_s: float = 0.0
    series: int = 0
    dropped: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    streak: int = 0  # failed scrapes since the last success
    dropping: bool = False  # the last successful scrape was not (all) kept


class ScrapeHealth:
    """Counters and ``up`` of every target; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, _State] = {}
        self.file_errors = 0

    def watch(self, target: ScrapeTarget, instance: str) -> None:
        """Start reporting ``target`` (down until its first scrape succeeds)."""
        labels = (target.url, instance, target.experiment, target.trial, target.role)
        with self._lock:
            self._targets[target.url] = _State(labels)

    def forget(self, url: str) -> None:
        """Stop reporting a target that was removed."""
        with self._lock:
            self._targets.pop(url, None)

    def succeeded(self, url: str, duration_s: float, series: int, dropped: str | None) -> None:
        """One successful scrape; ``dropped`` says why the pipeline did not take it all."""
        with self._lock:
            state = self._targets.get(url)
            if state is None:
                return
            if state.streak:
                logger.warning("scrape %s: up again after %d failed scrapes", url, state.streak)
            state.up, state.duration_s, state.series, state.streak = 1, duration_s, series, 0
            if dropped is not None and not state.dropping:
                logger.warning("scrape %s: dropped (%s); counting until kept", url, dropped)
            elif dropped is None and state.dropping:
                logger.warning("scrape %s: kept again", url)
            state.dropping = dropped is not None
            state.dropped += state.dropping

    def failed(self, url: str, reason: str, duration_s: float, detail: str) -> None:
        """One failed scrape, ``reason`` one of :data:`REASONS`."""
        with self._lock:
            state = self._targets.get(url)
            if state is None:
                return
            if state.streak == 0:
                logger.warning("scrape %s: %s (%s); counting until it is back", url, reason, detail)
            state.up, state.duration_s = 0, duration_s
            state.failures[reason] += 1
            state.streak += 1

    def file_error(self, path: str, message: str) -> None:
        """A version of the targets file that could not be used (logged once per version)."""
        with self._lock:
            self.file_errors += 1
        logger.error("scrape targets file %s refused, previous targets kept: %s", path, message)

    def up(self, url: str) -> int | None:
        """The ``up`` value of ``url``; None when it is not watched."""
        with self._lock:
            state = self._targets.get(url)
            return None if state is None else state.up

    def failures(self, url: str) -> dict[str, int]:
        """Failed scrapes of ``url`` by reason."""
        with self._lock:
            state = self._targets.get(url)
            return {} if state is None else dict(state.failures)

    def describe(self) -> list[Metric]:
        """The families :meth:`collect` builds, without samples."""
        return describe(_DECLARED)

    def collect(self) -> Iterator[Metric]:
        """Every target's families now."""
        with self._lock:
            states = [
                (s.labels, s.up, s.duration_s, s.series, s.dropped, dict(s.failures))
                for s in self._targets.values()
            ]
            file_errors = self.file_errors
        up, duration, series = _UP.build(), _DURATION.build(), _SERIES.build()
        failures, dropped = _FAILURES.build(), _DROPPED.build()
        for labels, is_up, seconds, n, lost, by_reason in states:
            up.add_metric(labels, is_up)
            duration.add_metric(labels, seconds)
            series.add_metric(labels, n)
            dropped.add_metric(labels, lost)
            for reason, count in by_reason.items():
                failures.add_metric((*labels, reason), count)
        yield from (up, duration, series, failures, dropped)
        yield _FILE_ERRORS.build(file_errors)
