"""The heartbeat's Prometheus families, served on the reading rank's endpoint or the collector's.

One series per rank and family, labelled with the run (``experiment``, ``trial``), the
``role``, ``rank`` and ``host``; the two timestamps also carry the ``phase`` the rank is in
(``(none)`` outside every ``record_timing`` scope).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from telemetry.heartbeat.beat import BeatGroup

__all__ = ["FAMILIES", "HeartbeatCollector"]

PREFIX = "rltel_heartbeat_"
GAUGES = {  # family suffix -> (help, Beat field); the phase-labelled ones first
    "last_progress_timestamp_seconds": ("when the rank last committed a step", "last_progress"),
    "phase_start_timestamp_seconds": ("when the rank entered its current phase", "phase_start"),
    "timestamp_seconds": ("when the rank sent its last beat", "sent"),
    "step": ("the last global step the rank committed", "step"),
    "median_step_seconds": ("median time between the rank's commits", "median_step_s"),
    "exited": ("1 once the rank closed its StatsLogger cleanly", "exited"),
}
OUTSIDE = "(none)"
"""The ``phase`` label of a rank outside every ``record_timing`` scope."""
PHASED = ("last_progress_timestamp_seconds", "phase_start_timestamp_seconds")
FLOOR = f"{PREFIX}stall_floor_seconds"
FAMILIES = {**{f"{PREFIX}{name}": "gauge" for name in GAUGES}, FLOOR: "gauge"}
"""Family name -> kind, to reserve on the Prometheus sink that serves them."""


class HeartbeatCollector:
    """Every rank's latest beat as gauges, built fresh at each scrape.

    Args:
        groups: returns the beat groups to show, one per run (the reading rank's one, or
            every run the collector holds beats of).
    """

    def __init__(self, groups: Callable[[], Iterable[BeatGroup]]) -> None:
        self._groups = groups

    def collect(self) -> Iterator[Metric]:
        labels = ["experiment", "trial", "role"]
        groups = list(self._groups())
        floor = GaugeMetricFamily(FLOOR, "no stuck-rank alert before this long", labels=labels)
        for group in groups:
            floor.add_metric(list(group.run), group.stall_floor_s)
        yield floor
        for name, (text, field) in GAUGES.items():
            extra = ["rank", "host", "phase"] if name in PHASED else ["rank", "host"]
            family = GaugeMetricFamily(f"{PREFIX}{name}", text, labels=labels + extra)
            for group in groups:
                for beat in group.beats:
                    values = [str(beat.rank), beat.host, beat.phase or OUTSIDE][: len(extra)]
                    family.add_metric([*group.run, *values], float(getattr(beat, field)))
            yield family
