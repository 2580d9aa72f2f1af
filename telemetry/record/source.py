"""The one contract between producers of reducible state and the export.

Every producer (a tracker, MoE balance, train_perf, a Twinkle metric) is a
:class:`StateSource`: ``collect`` hands its states to the coalesced DP reduction
(``key -> (StateLayout, 1-D float64 tensor)``, layouts built by
:mod:`telemetry.record.layout`, custom ones declared with
:class:`~telemetry.record.declared.DeclaredStates`), and ``build_points`` turns the
reduced states (only this source's keys, including keys recorded on other ranks only)
into points.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, runtime_checkable

from telemetry.model.snapshot import Point
from telemetry.record.layout import Reduced, State

__all__ = ["TRACKER_ID", "Collected", "StateSource"]

TRACKER_ID = "tracker:"
"""The ``source_id`` prefix of trackers, which are unique by name: ``tracker:<name>``."""


class Collected(NamedTuple):
    """A source's states for one export, and the per-key reduce groups of those that have
    one (AReaL's ``reduce_group`` override; trackers only)."""

    states: dict[str, State]
    groups: Mapping[str, object] = {}


@runtime_checkable
class StateSource(Protocol):
    """Anything whose states join the export's one coalesced reduction.

    ``source_id`` is the same on every rank (sources sharing one are told apart by their
    order, the same on every rank). ``collect(key, reset)`` returns the states (a tracker
    only those under ``key``; other sources ignore it) and, with ``reset``, starts a new
    window; ``build_points`` makes the points of the reduced states.
    """

    source_id: str

    def collect(self, key: str | None, reset: bool) -> Collected: ...

    def build_points(self, reduced: Reduced) -> list[Point]: ...
