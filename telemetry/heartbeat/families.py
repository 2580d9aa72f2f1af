"""The heartbeat's Prometheus families, served on the reading rank's endpoint or the collector's.

One series per rank and family, labelled with the run (``experiment``, ``trial``), the
``role``, the ``worker`` (a rollout or eval worker's id; none on a trainer's ranks),
``rank`` and ``host``; the two timestamps also carry the ``phase`` the rank is in
(``(none)`` outside every ``record_timing`` scope). The stall floor is one
series per run (the largest its readers sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from telemetry.heartbeat.beat import BeatGroup

__all__ = ["HeartbeatCollector"]

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
_FLOOR_HELP = "no stuck-rank alert before this long"


class HeartbeatCollector:
    """Every rank's latest beat as gauges, built fresh at each scrape.

    Args:
        groups: returns the beat groups to show, one per run (the reading rank's one, or
            every run the collector holds beats of).
    """

    def __init__(self, groups: Callable[[], Iterable[BeatGroup]]) -> None:
        self._groups = groups

    def describe(self) -> list[Metric]:
        """The families :meth:`collect` builds (:data:`GAUGES`, :data:`FLOOR`), no samples."""
        gauges = [GaugeMetricFamily(f"{PREFIX}{name}", text) for name, (text, _) in GAUGES.items()]
        return [*gauges, GaugeMetricFamily(FLOOR, _FLOOR_HELP)]

    def collect(self) -> Iterator[Metric]:
        labels = ["experiment", "trial", "role"]
        groups = list(self._groups())
        floors: dict[tuple[str, ...], float] = {}
        for group in groups:
            floors[group.run] = max(group.stall_floor_s, floors.get(group.run, 0.0))
        floor = GaugeMetricFamily(FLOOR, _FLOOR_HELP, labels=labels)
        for run, seconds in floors.items():
            floor.add_metric(list(run), seconds)
        yield floor
        for name, (text, field) in GAUGES.items():
            family = GaugeMetricFamily(f"{PREFIX}{name}", text)
            for group in groups:
                for beat in group.beats:
                    values = {"rank": str(beat.rank), "host": beat.host}
                    if group.worker:  # a trainer's ranks carry none (as Prometheus stores "")
                        values["worker"] = group.worker
                    if name in PHASED:
                        values["phase"] = beat.phase or OUTSIDE
                    row = dict(zip(labels, group.run, strict=True), **values)
                    family.add_sample(family.name, row, float(getattr(beat, field)))
            yield family
