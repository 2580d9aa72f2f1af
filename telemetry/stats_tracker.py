"""Drop-in for AReaL's ``areal.utils.stats_tracker``: module-level calls on a default tracker.

    from telemetry import stats_tracker
    with stats_tracker.scope("ppo_actor"):
        stats_tracker.denominator(n_valid_tokens=loss_mask.bool())
        stats_tracker.stat(loss=loss, denominator="n_valid_tokens")
    stats_tracker.get("rollout").scalar(reward=0.5)
    stats = stats_tracker.export_all(reduce_group=dp_group)

``export_all`` reduces every named tracker and every registered :class:`StateSource`
(MoE balance, train_perf, ...) in one coalesced reduction.

AReaL's module surface, name for name: ``DEFAULT_TRACKER``, ``TRACKERS``, ``LOCK``,
``MOE_AUX_LOSSES``, ``ReduceType``, ``DistributedStatsTracker``, ``get(name="")``,
``stat``, ``denominator``, ``scalar``, ``scope``, ``scope_func_wrapper``, ``disable_scope``,
``record_timing`` (always ``timeperf/<key>``), ``export`` and ``export_all``. Every export's
typed points are remembered by key (:mod:`telemetry.typed_keys`), so a plain dict merged
from exports commits with the same histograms, counters and units as the typed one.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence

import torch.distributed as dist

from telemetry import rank_spread, typed_keys
from telemetry.areal_tracker import DistributedStatsTracker
from telemetry.errors import KeyMismatchError
from telemetry.reduce import State, reduce_with_spread
from telemetry.snapshot import Point, Stats
from telemetry.source import StateSource
from telemetry.tracker import DistributedStatsTracker as _BaseTracker
from telemetry.tracker import ReduceType

__all__ = [
    "DEFAULT_TRACKER",
    "LOCK",
    "MOE_AUX_LOSSES",
    "TRACKERS",
    "DistributedStatsTracker",
    "ReduceType",
    "denominator",
    "disable_scope",
    "export",
    "export_all",
    "export_sources",
    "get",
    "record_timing",
    "register_source",
    "scalar",
    "scope",
    "scope_func_wrapper",
    "set_bucket_bounds",
    "stat",
    "stat_compact",
    "track_ranks",
    "unregister_source",
]

_TAG = re.compile(r"'(?:tracker|source):[^|']*\|")
_lock = threading.Lock()
_trackers: dict[str, DistributedStatsTracker] = {"": DistributedStatsTracker("")}
_sources: list[StateSource] = []
DEFAULT_TRACKER = _trackers[""]
TRACKERS = _trackers
"""AReaL's name for the registry of trackers by name ("" is the default tracker)."""
LOCK = _lock
MOE_AUX_LOSSES: dict = {}
"""AReaL's module-level dict of MoE auxiliary losses (kept for code that fills it)."""


def get(name: str = "") -> DistributedStatsTracker:
    """The tracker ``name`` (created on first use; "" is the default tracker, as in AReaL).

    A named tracker's keys start with ``name/``.
    """
    with _lock:
        tracker = _trackers.get(name)
        if tracker is None:
            tracker = _trackers[name] = DistributedStatsTracker(name)
        return tracker


def register_source(source: StateSource) -> None:
    """Make ``source`` join ``export_all``'s reduction (idempotent)."""
    with _lock:
        if not any(s is source for s in _sources):
            _sources.append(source)


def unregister_source(source: StateSource) -> None:
    """Stop exporting ``source``; unknown sources are ignored."""
    with _lock:
        _sources[:] = [s for s in _sources if s is not source]


def _tags(sources: Sequence[object]) -> list[str]:
    """Stable per-process tags, equal across ranks that register sources in the same order."""
    seen: dict[str, int] = {}
    tags = []
    for source in sources:
        if isinstance(source, _BaseTracker):
            tags.append(f"tracker:{source.name}")
            continue
        base = getattr(source, "source_id", type(source).__name__)
        seen[base] = seen.get(base, -1) + 1
        tags.append(f"source:{base}:{seen[base]}")
    return tags


def export_sources(
    sources: Iterable[object],
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    reset: bool = True,
) -> Stats:
    """Reduce trackers and state sources together (one coalesced reduction) into Stats.

    ``key`` limits trackers to keys starting with it. With ``reset=False`` the states
    are put back after reading (trackers only keep accumulating).
    """
    sources = list(sources)
    tags = _tags(sources)
    merged: dict[str, State] = {}
    for tag, source in zip(tags, sources):
        if isinstance(source, _BaseTracker):
            states = source.collect_states(key, reset=reset)
        else:
            states = source.collect_states()
            if reset:
                source.reset()
        merged.update((f"{tag}|{name}", state) for name, state in states.items())
    try:
        reduced, spreads = reduce_with_spread(
            merged, reduce_group, lambda tagged: rank_spread.tracked(tagged.partition("|")[2])
        )
    except KeyMismatchError as exc:  # name user keys, not internal source tags
        raise KeyMismatchError(_TAG.sub("'", str(exc))) from None
    by_tag: dict[str, dict] = {tag: {} for tag in tags}
    for tagged, entry in reduced.items():
        tag, _, name = tagged.partition("|")
        if tag not in by_tag and tag.startswith("tracker:"):
            # A named tracker that only other ranks used: every rank reports it.
            tags.append(tag)
            sources.append(DistributedStatsTracker(tag.partition(":")[2]))
            by_tag[tag] = {}
        if tag in by_tag:
            by_tag[tag][name] = entry
    points: list[Point] = []
    for tag, source in zip(tags, sources):
        entries = by_tag[tag]
        if isinstance(source, _BaseTracker):
            points.extend(source.build_points_with_layouts(entries))
        elif entries:
            points.extend(source.build_points({k: v for k, (_, v) in entries.items()}))
    for tagged, by_quantity in sorted(spreads.items()):
        points.extend(rank_spread.spread_points(tagged.partition("|")[2], by_quantity))
    typed_keys.remember(points)
    return Stats(points)


def export(
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    key_sync_group: dist.ProcessGroup | None = None,
    reset: bool = True,
) -> Stats:
    """Export the default tracker only (AReaL's ``stats_tracker.export``).

    ``key_sync_group`` is accepted for AReaL's signature; rltel reduces every key over
    ``reduce_group`` (per-key groups are not supported), so it changes nothing.
    """
    return DEFAULT_TRACKER.export(key, reduce_group, key_sync_group, reset)


def export_all(
    reduce_group: dist.ProcessGroup | None = None,
    key_sync_group: dist.ProcessGroup | None = None,
    reset: bool = True,
) -> Stats:
    """Export every tracker and registered source in one reduction (call on all ranks).

    ``key_sync_group`` is accepted for AReaL's signature and changes nothing (see export).
    """
    del key_sync_group
    with _lock:
        sources: list[object] = [_trackers[name] for name in sorted(_trackers)]
        sources.extend(_sources)
    return export_sources(sources, reduce_group=reduce_group, reset=reset)


denominator = DEFAULT_TRACKER.denominator
stat = DEFAULT_TRACKER.stat
stat_compact = DEFAULT_TRACKER.stat_compact
scalar = DEFAULT_TRACKER.scalar
scope = DEFAULT_TRACKER.scope
scope_func_wrapper = DEFAULT_TRACKER.scope_func_wrapper
disable_scope = DEFAULT_TRACKER.disable_scope
record_timing = DEFAULT_TRACKER.record_timing
set_bucket_bounds = DEFAULT_TRACKER.set_bucket_bounds
track_ranks = rank_spread.track_ranks
