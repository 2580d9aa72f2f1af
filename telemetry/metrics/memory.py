"""Memory peaks of this process: per export window and per ``record_timing`` phase.

On the CPU the peak is the process's resident high-water mark (``VmHWM`` in
``/proc/self/status``), reset by writing ``5`` to ``/proc/self/clear_refs`` (Linux 4.0+);
where that write is refused the peaks are the process's high-water mark since it started,
and one line says so. With a CUDA device in use, the allocator's peak allocated and
reserved bytes (``torch.cuda.max_memory_allocated``/``max_memory_reserved``) are read and
reset (``reset_peak_memory_stats``) the same way. Nothing here initialises CUDA.

One :class:`Peaks` folds every reading into the running maximum of the window and of each
open phase, so a reset at an inner phase's entry loses nothing of the outer ones.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["CudaMemory", "Peaks", "ProcessMemory", "Reader"]

_log = logging.getLogger(__name__)
_HWM = re.compile(rb"VmHWM:\s+(\d+) kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+) kB")

Reader = Callable[[], dict[str, float]]


class ProcessMemory:
    """The process's resident memory: ``peak_rss_bytes`` (resettable) and ``rss_bytes``."""

    def __init__(self, proc: Path = Path("/proc/self")) -> None:
        self._status, self._clear = proc / "status", proc / "clear_refs"
        self.resettable = True
        try:
            self._clear.write_text("5")
        except OSError as exc:
            self.resettable = False
            _log.info("hardware: %s not writable (%s): memory peaks are the process's "
                      "high-water mark since it started", self._clear, exc)  # fmt: skip

    def read(self) -> dict[str, float]:
        """Peak and current resident bytes."""
        text = self._status.read_bytes()
        peak, now = _HWM.search(text), _RSS.search(text)
        return {"peak_rss_bytes": int(peak[1]) * 1024.0, "rss_bytes": int(now[1]) * 1024.0}

    def reset(self) -> None:
        """Start a new high-water mark at the current resident size (where permitted)."""
        if self.resettable:
            self._clear.write_text("5")


class CudaMemory:
    """The CUDA caching allocator's peaks on the current device (``torch.cuda``)."""

    @staticmethod
    def in_use() -> bool:
        """Whether this process has initialised CUDA (never initialises it)."""
        torch = sys.modules.get("torch")
        return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()

    def read(self) -> dict[str, float]:
        """Peak allocated and reserved bytes since the last reset."""
        import torch

        return {
            "peak_allocated_bytes": float(torch.cuda.max_memory_allocated()),
            "peak_reserved_bytes": float(torch.cuda.max_memory_reserved()),
        }

    def reset(self) -> None:
        """Start new peaks at the current use."""
        import torch

        torch.cuda.reset_peak_memory_stats()


class Peaks:
    """Running maxima per window and per phase over a set of memory readers.

    :meth:`phase` is a :mod:`telemetry.record.phase` listener: at a phase's entry it folds
    the readings into the window and the open phases, then resets the peaks; at its exit
    it folds them again and keeps the phase's maximum (over its runs in the window).
    """

    def __init__(self, readers: list[ProcessMemory | CudaMemory]) -> None:
        self._readers = readers
        self._open: list[tuple[str, dict[str, float]]] = []
        self.window: dict[str, float] = {}
        self.phases: dict[str, dict[str, float]] = {}

    def _read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for reader in self._readers:
            out.update(reader.read())
        return out

    def _fold(self, readings: dict[str, float]) -> None:
        for target in (self.window, *(peaks for _, peaks in self._open)):
            for name, value in readings.items():
                if name.startswith("peak_") and value > target.get(name, -1.0):
                    target[name] = value

    def phase(self, name: str, entering: bool) -> None:
        """Fold and reset at a phase's entry; fold and keep its peaks at its exit."""
        self._fold(self._read())
        if entering:
            self._open.append((name, {}))
            for reader in self._readers:
                reader.reset()
            return
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index][0] == name:
                _, peaks = self._open.pop(index)
                kept = self.phases.setdefault(name, {})
                for key, value in peaks.items():
                    kept[key] = max(value, kept.get(key, -1.0))
                return

    def take(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """The window's readings (peaks and current values) and the phases' peaks; starts
        a new window (open phases keep their running peaks)."""
        readings = self._read()
        self._fold(readings)
        window = {**readings, **self.window}
        phases, self.window, self.phases = self.phases, {}, {}
        for reader in self._readers:
            reader.reset()
        return window, phases
