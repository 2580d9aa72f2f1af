"""The unit rule of recorded keys: seconds under the ``timeperf`` scope, else none."""

from __future__ import annotations

__all__ = ["TIMING_SCOPE", "key_unit"]

TIMING_SCOPE = "timeperf"
"""The scope of ``record_timing``'s keys (their unit is seconds)."""

_TIMED = f"/{TIMING_SCOPE}/"


def key_unit(key: str) -> str:
    """A recorded key's unit: ``s`` under a ``timeperf`` scope (``record_timing``), else ``""``.

    The one unit rule of recorded keys: the tracker's points, plain dicts' gauges, the
    straggler view's quantities without a declared unit and the report's axes all take it.
    """
    return "s" if _TIMED in f"/{key}" else ""
