"""The straggler view's settings and its chronic-straggler history.

Every rank of a reduction must use the same settings (they size the collectives). The
history is a pure function of the exports' top-k lists, which every rank computes from the
same reduced data, so it is the same on every rank.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, replace

from telemetry.record.source_key import Key

__all__ = ["Settings", "chronic", "configure", "settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """How the straggler view is computed.

    Args:
        top_k: how many of the slowest ranks each tracked quantity names.
        history: how many of the last exports the chronic-straggler counts span.
        slots: the first straggler round spreads ranks over this many slots (rank modulo
            ``slots``; 4 int64 per slot per tracked quantity, whatever the world size).
            Two of the ``top_k`` slowest ranks in one slot cost one more small round.
        max_series: the most per-rank series (ranks x quantities) one reduction gathers
            for :func:`~telemetry.record.rank_spread.rank_series` keys; keys past it (in
            key order) keep their aggregate series and log one warning.
    """

    top_k: int = 8
    history: int = 50
    slots: int = 64
    max_series: int = 4096

    def __post_init__(self) -> None:
        for name in ("top_k", "history", "slots", "max_series"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"straggler view: {name} must be a positive int, got {value!r}")


_lock = threading.Lock()
_settings = Settings()
_history: dict[tuple[Key, str], deque[tuple[int, ...]]] = {}


def settings() -> Settings:
    """The current settings."""
    with _lock:
        return _settings


def configure(**changes: int) -> Settings:
    """Change some settings (see :class:`Settings`); return the new ones.

    Every rank must make the same change. Changing ``top_k`` or ``history`` starts the
    chronic-straggler counts afresh.
    """
    global _settings
    with _lock:
        new = replace(_settings, **changes)
        if (new.top_k, new.history) != (_settings.top_k, _settings.history):
            _history.clear()
        _settings = new
        return new


def chronic(
    key: tuple[Key, str], top: tuple[int, ...], current: Settings
) -> tuple[tuple[tuple[int, int], ...], int]:
    """Record this export's top-k ranks of ``key``; return the ``top_k`` ranks most often in
    the top k over the last ``history`` exports (most first, lowest rank on ties) with how
    many exports each, and how many exports the history holds."""
    with _lock:
        past = _history.get(key)
        if past is None or past.maxlen != current.history:
            past = _history[key] = deque(maxlen=current.history)
        past.append(top)
        counts = Counter(rank for ranks in past for rank in ranks)
        held = len(past)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return tuple(ranked[: current.top_k]), held
