"""Drop-in for AReaL's ``areal.utils.stats_tracker``: module-level calls on a default tracker.

    from telemetry import stats_tracker
    with stats_tracker.scope("ppo_actor"):
        stats_tracker.denominator(n_valid_tokens=loss_mask.bool())
        stats_tracker.stat(loss=loss, denominator="n_valid_tokens")
    stats_tracker.get("rollout").scalar(reward=0.5)
    stats = stats_tracker.export_all(reduce_group=dp_group)

``export_all`` reduces every named tracker and every registered
:class:`~telemetry.record.source.StateSource` (MoE balance, train_perf, Twinkle metrics) in
one coalesced reduction.

AReaL's module surface, name for name: ``DEFAULT_TRACKER``, ``TRACKERS``, ``LOCK``,
``MOE_AUX_LOSSES``, ``ReduceType``, ``DistributedStatsTracker``, ``get(name="")``,
``stat``, ``denominator``, ``scalar``, ``scope``, ``scope_func_wrapper``, ``disable_scope``,
``record_timing`` (always ``timeperf/<key>``), ``export`` and ``export_all``. Every export's
typed points are remembered by key (:mod:`telemetry.record.typed_keys`), so a plain dict merged
from exports commits with the same histograms, counters and units as the typed one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import torch.distributed as dist

from telemetry.record import export as _export
from telemetry.record import rank_spread
from telemetry.record.export import register_source, registered_sources, unregister_source
from telemetry.record.source import StateSource
from telemetry.record.stats import Stats
from telemetry.record.tracker import DistributedStatsTracker, ReduceType

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
    "rank_series",
    "record_timing",
    "register_source",
    "scalar",
    "scope",
    "scope_func_wrapper",
    "set_bucket_bounds",
    "stat",
    "stat_compact",
    "straggler_view",
    "track_ranks",
    "unregister_source",
]

_lock = threading.Lock()
_trackers: dict[str, DistributedStatsTracker] = {"": DistributedStatsTracker("")}
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


def export_sources(
    sources: Iterable[StateSource],
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    reset: bool = True,
    key_sync_group: dist.ProcessGroup | None = None,
) -> Stats:
    """Reduce trackers and state sources together (one coalesced reduction) into Stats.

    ``key`` limits trackers to keys starting with it. With ``reset=False`` the states
    are put back after reading (trackers only keep accumulating). ``reduce_group=None``
    is rank-local: no collective, whatever process group exists.
    """
    return _export.export_sources(sources, key, reduce_group, reset, key_sync_group=key_sync_group)


def export(
    key: str | None = None,
    reduce_group: dist.ProcessGroup | None = None,
    key_sync_group: dist.ProcessGroup | None = None,
    reset: bool = True,
) -> Stats:
    """Export the default tracker only (AReaL's ``stats_tracker.export``).

    ``reduce_group=None`` is rank-local; ``key_sync_group`` is the group keys recorded
    with a per-key ``reduce_group`` are reduced over (as in AReaL).
    """
    return DEFAULT_TRACKER.export(key, reduce_group, key_sync_group, reset)


def export_all(
    reduce_group: dist.ProcessGroup | None = None,
    key_sync_group: dist.ProcessGroup | None = None,
    reset: bool = True,
) -> Stats:
    """Export every tracker and registered source in one reduction.

    With a ``reduce_group``, call it on every rank of the group: all get the same dict.
    ``reduce_group=None`` (AReaL's inference engines' ``export_stats``) is rank-local: no
    collective, this process's values only. ``key_sync_group`` as in :func:`export`.
    """
    with _lock:
        sources: list[StateSource] = [_trackers[name] for name in sorted(_trackers)]
    sources.extend(registered_sources())
    return export_sources(
        sources, reduce_group=reduce_group, reset=reset, key_sync_group=key_sync_group
    )


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
rank_series = rank_spread.rank_series
straggler_view = rank_spread.straggler_view
