"""The one contract between producers of reducible state and the export.

Every producer (a tracker, MoE balance, train_perf, a Twinkle metric) is a
:class:`StateSource`: ``collect`` hands its states to the coalesced DP reduction
(``key -> (StateLayout, 1-D float64 tensor)``, layouts built by
:mod:`telemetry.record.layout`, custom ones declared with
:class:`~telemetry.record.declared.DeclaredStates`), and ``build_points`` turns the
reduced states (only this source's keys, including keys recorded on other ranks only)
into points.

The export reduces the states of every source together, so two sources may hold the same
key name (two MoE balances, a tracker and a Twinkle metric). Each state is keyed there by a
:class:`SourceKey`: its source (``source_id`` and which of the sources sharing it) and the
source's own key. It is a tuple: equal, hashed and sorted by value, the same on every rank,
and pickled as its fields when ranks exchange layouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, runtime_checkable

from telemetry.model.snapshot import Point
from telemetry.record.layout import Reduced, State

__all__ = [
    "TRACKER_ID",
    "Collected",
    "Key",
    "SourceKey",
    "StateSource",
    "is_tracker_id",
    "key_name",
    "spelling",
]

TRACKER_ID = "tracker:"
"""The ``source_id`` prefix of trackers, which are unique by name: ``tracker:<name>``."""


def is_tracker_id(source_id: str) -> bool:
    """Whether ``source_id`` is a tracker's (``tracker:<name>``)."""
    return source_id.startswith(TRACKER_ID)


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


class SourceKey(NamedTuple):
    """A key of one source of an export: the source's ``source_id``, which of the sources
    sharing it (``nth``: 0 for trackers, which are unique by name), and the name the key
    has there (``key``)."""

    source_id: str
    nth: int
    key: str

    @property
    def source(self) -> tuple[str, int]:
        """The key's source: ``(source_id, nth)``."""
        return self.source_id, self.nth

    @property
    def is_tracker(self) -> bool:
        return is_tracker_id(self.source_id)

    def __str__(self) -> str:
        if self.is_tracker:
            name = self.source_id[len(TRACKER_ID) :]
            source = f"tracker {name!r}" if name else "the default tracker"
        else:
            number = f" #{self.nth + 1}" if self.nth else ""
            source = f"source {self.source_id!r}{number}"
        return f"key {self.key!r} of {source}"


Key = str | SourceKey
"""A key of a reduction: a plain name, or a source's key in the export's merged one."""


def key_name(key: Key) -> str:
    """How messages name ``key``: a plain name quoted, a source's key with its source."""
    return str(key) if isinstance(key, SourceKey) else repr(key)


def spelling(key: Key) -> str:
    """``key`` as key-set digests spell it: one text per key, the same on every rank (a
    plain name's ``repr``; a source's key by its fields, cheaper than the tuple's ``repr``)."""
    if isinstance(key, str):
        return repr(key)
    return f"{key.source_id!r} {key.nth} {key.key!r}"
