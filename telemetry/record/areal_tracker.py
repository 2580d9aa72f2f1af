"""AReaL's tracker class by its former path (the class is in :mod:`telemetry.record.tracker`).

There is one tracker class; this module keeps ``from telemetry.record.areal_tracker import
DistributedStatsTracker`` working.
"""

from telemetry.record.tracker import DistributedStatsTracker

__all__ = ["DistributedStatsTracker"]
