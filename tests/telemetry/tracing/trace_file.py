"""Reading and checking a Chrome trace event file (one JSON event per line, as AReaL writes).

The checks follow the trace event format: every event has ``name``, ``ph``, ``pid`` and,
except process metadata, ``tid``; timed events have an integer ``ts``; complete events
(``X``) a non-negative integer ``dur``; async events (``b``/``e``) an ``id``; instant events
(``i``) a scope ``s``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

REQUIRED = {
    "X": ("name", "ph", "ts", "dur", "pid", "tid"),
    "i": ("name", "ph", "ts", "pid", "tid", "s"),
    "b": ("name", "ph", "ts", "pid", "tid", "id", "cat"),
    "e": ("name", "ph", "ts", "pid", "tid", "id", "cat"),
    "M": ("name", "ph", "pid", "args"),
}


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every event of the file, in file order."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_fields(events: list[dict[str, Any]]) -> None:
    """Each event has its phase's required fields, with integer times."""
    for event in events:
        required = REQUIRED.get(event.get("ph"))
        assert required is not None, f"unknown phase: {event}"
        missing = [key for key in required if key not in event]
        assert not missing, f"{event} lacks {missing}"
        if "ts" in event:
            assert isinstance(event["ts"], int), event
        if event["ph"] == "X":
            assert isinstance(event["dur"], int) and event["dur"] >= 0, event


def check_nested_and_ordered(events: list[dict[str, Any]]) -> int:
    """Per thread, complete events nest (a later-starting event ends inside the ones open
    at its start, or after they end) and appear in the order they ended. Returns the
    deepest nesting seen."""
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            by_thread[(event["pid"], event["tid"])].append(event)
    deepest = 0
    for thread, complete in by_thread.items():
        ends = [e["ts"] + e["dur"] for e in complete]
        assert ends == sorted(ends), f"thread {thread}: not in end order"
        stack: list[int] = []
        for event in sorted(complete, key=lambda e: (e["ts"], -e["dur"])):
            end = event["ts"] + event["dur"]
            while stack and stack[-1] <= event["ts"]:
                stack.pop()
            assert not stack or end <= stack[-1], f"thread {thread}: {event} overlaps its parent"
            stack.append(end)
            deepest = max(deepest, len(stack))
    return deepest


def structure(events: list[dict[str, Any]], skip: frozenset[str] = frozenset()) -> list[tuple]:
    """Timed events as (phase, name, category, arg names), in file order, leaving out the
    categories in ``skip``: what two tracers of the same program must agree on."""
    return [
        (e["ph"], e["name"], e.get("cat"), tuple(sorted(e.get("args", {}))))
        for e in events
        if e["ph"] != "M" and e.get("cat") not in skip
    ]
