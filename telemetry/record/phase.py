"""The open ``record_timing`` phases of this process, for the heartbeat and per-phase memory.

``record_timing`` calls :func:`enter` at scope entry and :func:`leave` at exit: one list
append and one pop on a per-process stack (atomic under the GIL, no lock the training loop
could wait on). The heartbeat thread reads :func:`current` (the innermost open phase and
when it began) and :func:`last_change` (when the stack last changed). Listeners (the
per-phase memory peaks of :mod:`telemetry.hardware`) are called on entry and exit; with
none registered a phase costs two list operations and two clock reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = [
    "Listener",
    "add_listener",
    "current",
    "enter",
    "last_change",
    "leave",
    "remove_listener",
]

Listener = Callable[[str, bool], None]
"""Called as ``listener(name, entering)`` on the thread that runs the phase."""

IDLE = ""
"""The phase reported outside every ``record_timing`` scope."""

_open: list[tuple[str, float]] = []
_changed = [time.time()]
_listeners: list[Listener] = []


def enter(name: str) -> None:
    """A ``record_timing(name)`` scope opens (call first thing in the scope)."""
    now = time.time()
    _open.append((name, now))
    _changed[0] = now
    for listener in _listeners:
        listener(name, True)


def leave(name: str) -> None:
    """The innermost scope named ``name`` closes (scopes of other threads may interleave)."""
    for listener in _listeners:
        listener(name, False)
    for index in range(len(_open) - 1, -1, -1):
        if _open[index][0] == name:
            del _open[index]
            break
    _changed[0] = time.time()


def current() -> tuple[str, float]:
    """The innermost open phase and its start (unix seconds); :data:`IDLE` and the time of
    the last change when none is open."""
    try:
        return _open[-1]
    except IndexError:
        return IDLE, _changed[0]


def last_change() -> float:
    """When a phase last opened or closed (unix seconds)."""
    return _changed[0]


def add_listener(listener: Listener) -> None:
    """Call ``listener`` on every phase entry and exit from now on (idempotent)."""
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener``; unknown listeners are ignored."""
    if listener in _listeners:
        _listeners.remove(listener)
