"""Export: one coalesced reduction over state sources, then their points.

Every producer is a :class:`~telemetry.record.source.StateSource` (trackers, MoE balance,
train_perf, Twinkle metrics): the export collects each one's states, reduces them all
together (one reduction per group), and hands each source its reduced states back.
:func:`reduce_sources` is that reduction alone, the one way states are reduced: the
export builds the points from it, and a Twinkle metric's ``calculate()`` its values.
Sources registered here (:func:`register_source`; a producer's ``close`` calls
:func:`unregister_source`) join ``stats_tracker.export_all``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch.distributed as dist

from telemetry.model.snapshot import Point
from telemetry.record import rank_spread, typed_keys
from telemetry.record.gather import gather_to_first, wants_gather
from telemetry.record.layout import Reduced, State
from telemetry.record.points import tracker_points
from telemetry.record.reduce import ReducedStates, Spreads, reduce_and_vote
from telemetry.record.source import SourceKey, StateSource, is_tracker_id
from telemetry.record.stats import Stats
from telemetry.samples import default_buffer

__all__ = [
    "export_sources",
    "reduce_sources",
    "register_source",
    "registered_sources",
    "unregister_source",
]

_lock = threading.Lock()
_sources: list[StateSource] = []


def register_source(source: StateSource) -> None:
    """Make ``source`` join ``export_all``'s reduction (idempotent).

    Raises:
        TypeError: ``source`` is not a :class:`StateSource`.
    """
    if not isinstance(source, StateSource):
        raise TypeError(
            f"{type(source).__name__} is not a StateSource: it needs source_id, "
            "collect(key, reset) and build_points(reduced)"
        )
    with _lock:
        if not any(s is source for s in _sources):
            _sources.append(source)


def unregister_source(source: StateSource) -> None:
    """Stop exporting ``source``; unknown sources are ignored."""
    with _lock:
        _sources[:] = [s for s in _sources if s is not source]


def registered_sources() -> list[StateSource]:
    """The registered sources, in registration order."""
    with _lock:
        return list(_sources)


_Ref = tuple[str, int]
"""One source of an export: its ``source_id`` and, among the sources sharing it, which one
(0 for trackers, which are unique by name); :attr:`SourceKey.source` of its keys."""


def _refs(sources: Sequence[StateSource]) -> list[_Ref]:
    """Each source's reference, equal across ranks that hold sources in the same order:
    trackers are unique by name, other sources sharing a ``source_id`` are counted."""
    seen: dict[str, int] = {}
    refs = []
    for source in sources:
        source_id = source.source_id
        if is_tracker_id(source_id):
            refs.append((source_id, 0))
            continue
        seen[source_id] = seen.get(source_id, -1) + 1
        refs.append((source_id, seen[source_id]))
    return refs


class _ReducedSources(NamedTuple):
    """The states of an export's sources, reduced together and split per source.

    ``refs`` holds each source's reference, in the sources' order; ``by_source`` the reduced
    states of each source by its own keys: every given source (empty when no rank recorded
    any of its keys) and each source that only other ranks hold. ``spreads`` are the
    straggler views by key, and ``gather`` says whether a rank voted to gather the samples.
    """

    refs: list[_Ref]
    by_source: dict[_Ref, Reduced]
    spreads: Spreads
    gather: bool

    def of(self, index: int) -> Reduced:
        """The reduced states of the ``index``-th given source."""
        return self.by_source[self.refs[index]]


def reduce_sources(
    sources: Sequence[StateSource],
    reduce_group: dist.ProcessGroup | None = None,
    *,
    key: str | None = None,
    reset: bool = True,
    key_sync_group: dist.ProcessGroup | None = None,
    vote: bool = False,
    rank_spreads: bool = True,
) -> _ReducedSources:
    """Collect the states of ``sources``, reduce them together and split them per source.

    The one way states are reduced: :func:`export_sources` and a Twinkle metric's
    ``calculate()`` both come here. Each state is keyed by its :class:`SourceKey` (so two
    sources may hold the same key name, and a mismatch names the key and its source).

    Args:
        sources: state sources, in the same order on every rank.
        reduce_group: the data-parallel group; ``None`` is rank-local (no collective).
        key: limits trackers to keys starting with it.
        reset: each source starts a new window (False: trackers put their states back).
        key_sync_group: the group that keys with a per-key ``reduce_group`` are reduced
            over (:func:`export_sources`).
        vote: this rank's vote to gather the samples, carried by the first reduction's
            key-set check.
        rank_spreads: also compare the tracked quantities across ranks
            (:mod:`telemetry.record.rank_spread`); False reduces the states only.

    Raises:
        KeyMismatchError: a key has different layouts on different ranks (on every rank).
    """
    refs = _refs(sources)
    merged, key_groups = _collect(sources, refs, key, reset)
    reduced: ReducedStates = {}
    spreads: Spreads = {}
    gather = False
    for group, states in _reductions(merged, key_groups, reduce_group, key_sync_group):
        # the first reduction is over reduce_group: it carries the samples' vote
        done, spread, voted = reduce_and_vote(
            states,
            group,
            _tracked if rank_spreads else _untracked,
            series=lambda source_key: rank_spread.series(source_key.key),
            vote=vote,
        )
        gather, vote = gather or voted, False
        reduced.update(done)
        spreads.update(spread)
    return _ReducedSources(refs, _by_source(refs, reduced), spreads, gather)


def _tracked(source_key: SourceKey) -> bool:
    return rank_spread.tracked(source_key.key)


def _untracked(source_key: SourceKey) -> bool:
    return False


def _collect(
    sources: Sequence[StateSource], refs: list[_Ref], key: str | None, reset: bool
) -> tuple[dict[SourceKey, State], dict[SourceKey, object]]:
    """Every source's states and per-key groups, keyed by :class:`SourceKey`."""
    merged: dict[SourceKey, State] = {}
    key_groups: dict[SourceKey, object] = {}
    for ref, source in zip(refs, sources):
        states, groups = source.collect(key, reset)
        key_groups.update((SourceKey(*ref, name), group) for name, group in groups.items())
        merged.update((SourceKey(*ref, name), state) for name, state in states.items())
    return merged, key_groups


def _by_source(refs: list[_Ref], reduced: ReducedStates) -> dict[_Ref, Reduced]:
    """``reduced`` split per source: each of ``refs`` (maybe empty), then the sources that
    only other ranks hold."""
    by_source: dict[_Ref, dict] = {ref: {} for ref in refs}
    for source_key, entry in reduced.items():
        by_source.setdefault(source_key.source, {})[source_key.key] = entry
    return by_source


def export_sources(
    sources: Iterable[StateSource],
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    reset: bool = True,
    *,
    key_sync_group: dist.ProcessGroup | None = None,
) -> Stats:
    """Reduce the states of ``sources`` together (one coalesced reduction) into Stats.

    Args:
        sources: trackers and other state sources, in the same order on every rank. A
            named tracker that only other ranks used is reported too.
        key: limits trackers to keys starting with it.
        reduce_group: the data-parallel group; ``None`` is rank-local (no collective), as
            AReaL's ``export_all(reduce_group=None)``.
        reset: False puts the states back after reading (trackers keep accumulating); True
            also moves the samples every rank of ``reduce_group`` kept to its first rank
            (:mod:`telemetry.record.gather`), which commits them, when a rank other than
            the first holds some (decided in the reduction's key-set check).
        key_sync_group: the group that keys recorded with a per-key ``reduce_group`` are
            reduced over (every rank of it joins that reduction); without it, each such
            key is reduced over its own group. One more coalesced reduction per group.
    """
    sources = list(sources)
    result = reduce_sources(
        sources,
        reduce_group,
        key=key,
        reset=reset,
        key_sync_group=key_sync_group,
        vote=reset and wants_gather(reduce_group, default_buffer()),
    )
    points = _source_points(sources, result)
    typed_keys.remember(points)
    if result.gather:
        gather_to_first(reduce_group, default_buffer())
    return Stats(points)


def _source_points(sources: list[StateSource], result: _ReducedSources) -> list[Point]:
    """The points of every source that has reduced states (every tracker), of each tracker
    that only other ranks used, then the straggler views (other sources' first)."""
    points: list[Point] = []
    for ref, source in zip(result.refs, sources):
        if result.by_source[ref] or is_tracker_id(ref[0]):
            points.extend(source.build_points(result.by_source[ref]))
    local = set(result.refs)
    for ref, states_of_ref in result.by_source.items():
        if ref not in local and is_tracker_id(ref[0]):
            points.extend(tracker_points(states_of_ref, {}))
    for source_key in sorted(result.spreads, key=lambda k: (k.is_tracker, k)):
        layout = result.by_source[source_key.source][source_key.key][0]
        points.extend(rank_spread.spread_points(source_key.key, result.spreads[source_key], layout))
    return points


def _reductions(
    merged: dict[SourceKey, State],
    key_groups: dict[SourceKey, object],
    reduce_group: dist.ProcessGroup | None,
    key_sync_group: dist.ProcessGroup | None,
) -> list[tuple[object, dict[SourceKey, State]]]:
    """The reductions of one export: the export's group, then the per-key overrides.

    With ``key_sync_group`` every rank reduces its override keys (maybe none) over it, so
    ranks without such keys still join; without it, one reduction per override group, in
    the order of each group's first key (the same on every rank that holds the keys).
    """
    plan: list[tuple[object, dict[SourceKey, State]]] = [
        (reduce_group, {k: s for k, s in merged.items() if k not in key_groups})
    ]
    overrides = {k: merged[k] for k in sorted(key_groups) if k in merged}
    if key_sync_group is not None:
        plan.append((key_sync_group, overrides))
        return plan
    by_group: dict[int, tuple[object, dict[SourceKey, State]]] = {}
    for source_key, state in overrides.items():
        group = key_groups[source_key]
        by_group.setdefault(id(group), (group, {}))[1][source_key] = state
    plan.extend(by_group.values())
    return plan
