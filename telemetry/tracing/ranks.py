"""``AREAL_PERF_TRACER_RANKS``: which ranks trace (AReaL's main branch).

AReaL's main reads the variable with ``areal.utils.environ.rank_in_env_filter``; rltel reads
it by the same rules. Unset, empty or ``all`` (any case, spaces around ignored): every rank.
Otherwise a comma-separated list of ranks and inclusive ranges (``0``, ``0,2``, ``0-3``,
``1,4-5``); an empty part is skipped; a part that is not a rank or a range (``x``, ``3-1``)
is ignored with one warning per value, so a value with no valid part selects no rank.
AReaL 1.0.4 has no such variable (every rank traces).
"""

from __future__ import annotations

import logging
import os

__all__ = ["RANKS_ENV", "rank_selected"]

RANKS_ENV = "AREAL_PERF_TRACER_RANKS"

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _part_ranks(part: str) -> range:
    """The ranks of one part: ``n`` or ``a-b`` (``a <= b``).

    Raises:
        ValueError: anything else.
    """
    if "-" in part:
        first, last = (int(text) for text in part.split("-", 1))
        if last < first:
            raise ValueError(part)
        return range(first, last + 1)
    rank = int(part)
    return range(rank, rank + 1)


def rank_selected(rank: int) -> bool:
    """Whether ``rank`` traces under the current ``AREAL_PERF_TRACER_RANKS``."""
    value = os.environ.get(RANKS_ENV, "").strip().lower()
    if value in ("", "all"):
        return True
    selected = False
    for part in (text.strip() for text in value.split(",")):
        if not part:
            continue
        try:
            selected = selected or rank in _part_ranks(part)
        except ValueError:
            if value not in _warned:
                _warned.add(value)
                logger.warning("%s=%r: ignoring %r (not a rank or a range)", RANKS_ENV, value, part)
    return selected
