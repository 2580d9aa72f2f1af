"""The collector's health as its ``/metrics`` endpoint reports it (``rltel_collector_*``).

``rltel demo`` over OTLP reads it once the ranks and rollout workers are done and the
collector's queues are empty: which of the run's sinks started and wrote, which failed to
start, are degraded or dropped snapshots, and the points the collector rejected.
"""

from __future__ import annotations

import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "rltel_collector_"
SHARED = "shared"  # the run label of the sinks every run shares (Prometheus, remote write)
IDLE_TIMEOUT_S = 30.0
POLL_S = 0.1
SINK_COUNTERS = ("exported", "failed", "dropped", "timed_out")


class HealthUnavailable(Exception):
    """The endpoint did not answer, or it is not an rltel collector's."""


@dataclass(frozen=True)
class CollectorHealth:
    """One scrape of a collector's own metrics."""

    sinks: dict[tuple[str, str], dict[str, float]]  # (run or "shared", sink) -> counters
    start_failures: dict[tuple[str, str], str]  # (run, sink) -> error
    run_dirs: dict[str, str]  # run -> its directory on the collector's host
    collector: dict[str, float] = field(default_factory=dict)  # points_rejected, ...

    def idle(self) -> bool:
        """Nothing queued or held: every accepted snapshot reached its sinks."""
        queued = any(s.get("queue_depth", 0) for s in self.sinks.values())
        return not queued and self.collector.get("pending_bytes", 0) == 0

    def wrote(self, run: str, sink: str) -> bool:
        """Whether sink ``sink`` of ``run`` started and exported at least one snapshot."""
        return self.sinks.get((run, sink), {}).get("exported", 0) > 0

    def problems(self, run: str, whole_collector: bool) -> list[str]:
        """What went wrong for ``run`` (and its shared sinks); with ``whole_collector``, the
        collector's own refusals too (a collector that serves only this run)."""
        found = [
            f"sink {sink} of run {of} failed to start: {error}"
            for (of, sink), error in sorted(self.start_failures.items())
            if of == run
        ]
        for (of, sink), counters in sorted(self.sinks.items()):
            if of not in (run, SHARED):
                continue
            where = f"sink {sink} of run {of}" if of != SHARED else f"shared sink {sink}"
            if counters.get("degraded"):
                found.append(f"{where} is degraded (its last export failed or stalled)")
            for name, what in (
                ("failed", "exports failed"),
                ("timed_out", "exports timed out"),
                ("dropped", "snapshots dropped"),
            ):
                if counters.get(name):
                    found.append(f"{where}: {counters[name]:.0f} {what}")
        if whole_collector:
            for name, what in (
                ("points_rejected", "data points rejected"),
                ("runs_refused", "snapshots refused (past limits.max_runs)"),
            ):
                if self.collector.get(name):
                    found.append(f"collector: {self.collector[name]:.0f} {what}")
        return found


def parse(text: str) -> CollectorHealth:
    """The health in one exposition of the collector's ``/metrics``.

    Raises:
        HealthUnavailable: no ``rltel_collector_*`` families (not a collector's endpoint).
    """
    sinks: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    failures, dirs, collector = {}, {}, {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        name = family.name.removeprefix(PREFIX)
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = sample.labels
            if name == "sink_start_failed":
                failures[labels["run"], labels["sink"]] = labels["error"]
            elif name == "run_info":
                dirs[labels["run"]] = labels["dir"]
            elif name.startswith("sink_"):
                sinks[labels["run"], labels["sink"]][name.removeprefix("sink_")] = sample.value
            elif not labels:
                collector[name] = sample.value
    if "runs" not in collector:
        raise HealthUnavailable("not an rltel collector's endpoint (no rltel_collector_runs)")
    return CollectorHealth(dict(sinks), failures, dirs, collector)


def read_health(url: str, timeout_s: float = 10.0) -> CollectorHealth:
    """One scrape of ``url``.

    Raises:
        HealthUnavailable: it did not answer, or is not a collector's endpoint.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode()
    except (OSError, ValueError) as exc:
        raise HealthUnavailable(f"{url} did not answer: {exc}") from exc
    try:
        return parse(text)
    except ValueError as exc:
        raise HealthUnavailable(f"{url} is not a Prometheus endpoint: {exc}") from exc


def settled_health(url: str, timeout_s: float = IDLE_TIMEOUT_S) -> CollectorHealth:
    """The health once the collector is idle (or after ``timeout_s``, as it is then).

    Raises:
        HealthUnavailable: as :func:`read_health`.
    """
    deadline = time.monotonic() + timeout_s
    health = read_health(url)
    while not health.idle() and time.monotonic() < deadline:
        time.sleep(POLL_S)
        health = read_health(url)
    return health
