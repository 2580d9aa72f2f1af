"""Export: one coalesced reduction over trackers and state sources, then their points.

Producers that are not trackers (MoE balance, train_perf, ...) join ``export_all`` through
the registry here (:func:`register_source`). A tracker is any source that collects by key
prefix and builds points from reduced states with their layouts
(``collect_states(key, reset)``, ``build_points_with_layouts``); other sources implement
:class:`~telemetry.record.source.StateSource`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence

import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.model.snapshot import Point
from telemetry.record import rank_spread, typed_keys
from telemetry.record.layout import State
from telemetry.record.reduce import reduce_with_spread
from telemetry.record.stats import Stats

__all__ = ["export_sources", "register_source", "registered_sources", "unregister_source"]

_TAG = re.compile(r"'(?:tracker|source):[^|']*\|")
_lock = threading.Lock()
_sources: list[object] = []


def register_source(source: object) -> None:
    """Make ``source`` join ``export_all``'s reduction (idempotent)."""
    with _lock:
        if not any(s is source for s in _sources):
            _sources.append(source)


def unregister_source(source: object) -> None:
    """Stop exporting ``source``; unknown sources are ignored."""
    with _lock:
        _sources[:] = [s for s in _sources if s is not source]


def registered_sources() -> list[object]:
    """The registered sources, in registration order."""
    with _lock:
        return list(_sources)


def _is_tracker(source: object) -> bool:
    return hasattr(source, "build_points_with_layouts")


def _tags(sources: Sequence[object]) -> list[str]:
    """Stable per-process tags, equal across ranks that register sources in the same order."""
    seen: dict[str, int] = {}
    tags = []
    for source in sources:
        if _is_tracker(source):
            tags.append(f"tracker:{source.name}")
            continue
        base = getattr(source, "source_id", type(source).__name__)
        seen[base] = seen.get(base, -1) + 1
        tags.append(f"source:{base}:{seen[base]}")
    return tags


def export_sources(
    sources: Iterable[object],
    make_tracker: Callable[[str], object],
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    reset: bool = True,
    *,
    key_sync_group: dist.ProcessGroup | None = None,
) -> Stats:
    """Reduce trackers and state sources together (one coalesced reduction) into Stats.

    Args:
        sources: trackers and state sources, in the same order on every rank.
        make_tracker: builds an empty tracker by name, for a named tracker that only
            other ranks used (every rank reports it).
        key: limits trackers to keys starting with it.
        reduce_group: the data-parallel group; ``None`` is rank-local (no collective), as
            AReaL's ``export_all(reduce_group=None)``.
        reset: False puts the states back after reading (trackers keep accumulating).
        key_sync_group: the group that keys recorded with a per-key ``reduce_group`` are
            reduced over (every rank of it joins that reduction); without it, each such
            key is reduced over its own group. One more coalesced reduction per group.
    """
    sources = list(sources)
    tags = _tags(sources)
    merged: dict[str, State] = {}
    key_groups: dict[str, object] = {}
    for tag, source in zip(tags, sources):
        if _is_tracker(source):
            states, groups = source.collect(key, reset=reset)
            key_groups.update((f"{tag}|{name}", group) for name, group in groups.items())
        else:
            states = source.collect_states()
            if reset:
                source.reset()
        merged.update((f"{tag}|{name}", state) for name, state in states.items())
    reduced: dict = {}
    spreads: dict = {}
    for group, states in _reductions(merged, key_groups, reduce_group, key_sync_group):
        try:
            done, spread = reduce_with_spread(
                states,
                group,
                lambda tagged: rank_spread.tracked(tagged.partition("|")[2]),
                series=lambda tagged: rank_spread.series(tagged.partition("|")[2]),
            )
        except KeyMismatchError as exc:  # name user keys, not internal source tags
            raise KeyMismatchError(_TAG.sub("'", str(exc))) from None
        reduced.update(done)
        spreads.update(spread)
    by_tag: dict[str, dict] = {tag: {} for tag in tags}
    for tagged, entry in reduced.items():
        tag, _, name = tagged.partition("|")
        if tag not in by_tag and tag.startswith("tracker:"):
            tags.append(tag)
            sources.append(make_tracker(tag.partition(":")[2]))
            by_tag[tag] = {}
        if tag in by_tag:
            by_tag[tag][name] = entry
    points: list[Point] = []
    for tag, source in zip(tags, sources):
        entries = by_tag[tag]
        if _is_tracker(source):
            points.extend(source.build_points_with_layouts(entries))
        elif entries:
            points.extend(source.build_points({k: v for k, (_, v) in entries.items()}))
    for tagged, by_quantity in sorted(spreads.items()):
        points.extend(rank_spread.spread_points(tagged.partition("|")[2], by_quantity))
    typed_keys.remember(points)
    return Stats(points)


def _reductions(
    merged: dict[str, State],
    key_groups: dict[str, object],
    reduce_group: dist.ProcessGroup | None,
    key_sync_group: dist.ProcessGroup | None,
) -> list[tuple[object, dict[str, State]]]:
    """The reductions of one export: the export's group, then the per-key overrides.

    With ``key_sync_group`` every rank reduces its override keys (maybe none) over it, so
    ranks without such keys still join; without it, one reduction per override group, in
    the order of each group's first key (the same on every rank that holds the keys).
    """
    plan: list[tuple[object, dict[str, State]]] = [
        (reduce_group, {k: s for k, s in merged.items() if k not in key_groups})
    ]
    overrides = {k: merged[k] for k in sorted(key_groups) if k in merged}
    if key_sync_group is not None:
        plan.append((key_sync_group, overrides))
        return plan
    by_group: dict[int, tuple[object, dict[str, State]]] = {}
    for tagged, state in overrides.items():
        group = key_groups[tagged]
        by_group.setdefault(id(group), (group, {}))[1][tagged] = state
    plan.extend(by_group.values())
    return plan
