"""AReaL's trace categories (``PerfTraceCategory``, how a category argument is named) and
session events (``SessionTraceEvent``)."""

from __future__ import annotations

from enum import Enum

__all__ = [
    "Category",
    "CategoryLike",
    "PerfTraceCategory",
    "SessionTraceEvent",
    "category_name",
]


class PerfTraceCategory(str, Enum):
    """What a traced scope spends its time on (AReaL's categories, the same values)."""

    COMPUTE = "compute"
    COMM = "comm"
    IO = "io"
    SYNC = "sync"
    SCHEDULER = "scheduler"
    INSTR = "instr"
    MISC = "misc"


Category = PerfTraceCategory
"""AReaL's short name for :class:`PerfTraceCategory`."""

CategoryLike = PerfTraceCategory | str | None

_LONG_NAMES = {
    "communication": PerfTraceCategory.COMM,
    "synchronization": PerfTraceCategory.SYNC,
    "scheduling": PerfTraceCategory.SCHEDULER,
    "instrumentation": PerfTraceCategory.INSTR,
}
_BY_VALUE = {member.value: member for member in PerfTraceCategory}


def category_name(category: CategoryLike) -> str:
    """The category's value as AReaL writes it: a member's value, a known name or long
    name (any case) as its member's value, any other non-blank string unchanged, and
    ``misc`` for ``None``, blank strings and other types."""
    if isinstance(category, PerfTraceCategory):
        return category.value
    if not isinstance(category, str) or not category.strip():
        return PerfTraceCategory.MISC.value
    key = category.strip().lower()
    member = _BY_VALUE.get(key) or _LONG_NAMES.get(key)
    return member.value if member is not None else category


class SessionTraceEvent(str, Enum):
    """AReaL's session lifecycle events."""

    FINALIZED = "finalized"
    GENERATE_START = "generate_start"
    GENERATE_END = "generate_end"
    REWARD_START = "reward_start"
    REWARD_END = "reward_end"
    TOOLCALL_START = "toolcall_start"
    TOOLCALL_END = "toolcall_end"
