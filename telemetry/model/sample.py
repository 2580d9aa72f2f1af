"""One kept rollout sample: the plain-data form every sink reads (no tensors, no protobuf)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TRUNCATION_MARK = " …[truncated]"
"""Appended to a text field cut at the samples' byte limit (counted inside the limit)."""
_MARK_BYTES = len(TRUNCATION_MARK.encode())


def truncate(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` if it fits in ``max_bytes`` UTF-8 bytes, else its longest prefix that fits
    with :data:`TRUNCATION_MARK` appended; (text, whether cut). A cut never splits a
    character."""
    if len(text) * 4 <= max_bytes:  # no character is longer than 4 bytes
        return text, False
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text, False
    head = raw[: max_bytes - _MARK_BYTES].decode("utf-8", "ignore")
    return head + TRUNCATION_MARK, True


@dataclass(frozen=True, slots=True)
class Sample:
    """A sample of one stream at one step, as it leaves the process (redacted, truncated).

    Attributes:
        stream: ``rollout``, ``eval-rollout`` or the user's stream name.
        text: text fields in the order logged, e.g. ``(("prompt", ...), ("completion", ...))``.
        numbers: numeric fields in the order logged, e.g. ``(("reward", 1.0),)``.
        truncated: names of the text fields cut at the limit (each ends in the mark).
    """

    stream: str
    text: tuple[tuple[str, str], ...] = ()
    numbers: tuple[tuple[str, float], ...] = ()
    truncated: tuple[str, ...] = ()

    def number(self, name: str) -> float | None:
        """The numeric field ``name``, or None."""
        return next((value for key, value in self.numbers if key == name), None)

    def fields(self) -> dict[str, Any]:
        """Text then numeric fields by name (a text and a numeric field never share one)."""
        return {**dict(self.text), **dict(self.numbers)}
