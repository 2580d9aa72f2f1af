"""Text fields of a sample: cut at a UTF-8 byte limit, the cut marked."""

from __future__ import annotations

from telemetry.model.sample import TRUNCATION_MARK

_MARK_BYTES = len(TRUNCATION_MARK.encode())


def truncate(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` if it fits in ``max_bytes`` UTF-8 bytes, else its longest prefix that fits
    with :data:`~telemetry.model.sample.TRUNCATION_MARK` appended; (text, whether cut).

    A cut never splits a character.
    """
    if len(text) * 4 <= max_bytes:  # no character is longer than 4 bytes
        return text, False
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return text, False
    head = raw[: max_bytes - _MARK_BYTES].decode("utf-8", "ignore")
    return head + TRUNCATION_MARK, True
