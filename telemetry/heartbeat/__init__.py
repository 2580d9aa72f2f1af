"""Each rank's heartbeat, out of band from the collectives: the beat, the store board it is
left on, the thread that beats, its Prometheus families and its wire form.

The StatsLogger starts it (:func:`rltel.logger_heartbeat.start_heartbeat`); over OTLP the
beats travel by :mod:`exporters.otlp.heartbeat`.
"""

from __future__ import annotations

from telemetry.heartbeat.beat import Beat, BeatGroup, Progress
from telemetry.heartbeat.board import StoreBoard
from telemetry.heartbeat.families import HeartbeatCollector
from telemetry.heartbeat.thread import Heartbeat

__all__ = [
    "Beat",
    "BeatGroup",
    "Heartbeat",
    "HeartbeatCollector",
    "Progress",
    "StoreBoard",
]
