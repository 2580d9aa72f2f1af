"""Spans dropped at a full bound: counted, and logged once per change between dropping
and not (when dropping starts, and when there is room again, with the count so far)."""

from __future__ import annotations

import logging

__all__ = ["Drops"]


class Drops:
    """The drop count and log of one bounded span queue.

    Args:
        logger: where the two warnings go (the queue's module logger).
        full: the warning when dropping starts.
        room: the warning when there is room again; ``%d`` is the count so far.
    """

    def __init__(self, logger: logging.Logger, full: str, room: str) -> None:
        self.count = 0
        self._logger = logger
        self._full = full
        self._room = room
        self._dropping = False

    def drop(self) -> None:
        """Count one span dropped; warn if it is the first since there was room."""
        self.count += 1
        if not self._dropping:
            self._dropping = True
            self._logger.warning(self._full)

    def kept(self) -> None:
        """One span fits again; warn, with the count, if spans were being dropped."""
        if self._dropping:
            self._dropping = False
            self._logger.warning(self._room, self.count)
