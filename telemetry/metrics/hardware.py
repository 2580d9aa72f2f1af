"""Hardware per rank, sampled at export: memory peaks per window and per phase, GPU health.

:class:`HardwareSource` joins ``stats_tracker.export_all`` (every rank must start it, as
the StatsLogger does with ``hardware.enabled``). At each export it reads, on the exporting
thread and never while recording:

* ``hardware/memory/peak_rss_bytes`` and ``rss_bytes`` (the process), and with CUDA in use
  ``peak_allocated_bytes`` and ``peak_reserved_bytes``: peaks over the export window;
* ``hardware/phase/<phase>/<peak>``: the same peaks per ``record_timing`` phase that closed
  in the window (``phase_memory``: the peaks reset at each scope's entry);
* ``hardware/gpu/<reading>`` through NVML (:mod:`telemetry.metrics.nvml`), where it loads.

Each reading is a state declared once, at its first sight (the keys follow the phases and
the GPU's readings), through :class:`~telemetry.record.declared.DeclaredStates`: ``[value,
1, value, -value]`` reduced as a stat. Each key is the mean over the ranks that have it;
every key gets the straggler view
(``<key>/rank_min``, ``rank_max``, ``slowest_rank``, top k) and per-rank gauges
(``<key>/per_rank``, attribute ``rank``) on the committing rank.
"""

from __future__ import annotations

import logging

import torch

from telemetry.metrics.memory import CudaMemory, Peaks, ProcessMemory
from telemetry.metrics.nvml import GpuReader, open_device
from telemetry.model.snapshot import Gauge, Point
from telemetry.record import phase, stats_tracker
from telemetry.record.declared import DeclaredStates
from telemetry.record.export import register_source, unregister_source
from telemetry.record.layout import STAT_OPS, PerRank, Reduced
from telemetry.record.source import Collected

__all__ = ["PATTERN", "HardwareSource"]

PREFIX = "hardware/"
PATTERN = f"{PREFIX}*"
"""The keys of this source, for the straggler view and per-rank series."""
_log = logging.getLogger(__name__)
_PER_RANK = (PerRank("", 0, 1, present=1),)
"""A rank's value (sum over count) where it has the reading."""


class HardwareSource:
    """This rank's hardware readings as a state source of ``export_all``.

    Args:
        phase_memory: keep memory peaks per ``record_timing`` phase.
        nvml: read the GPU through NVML where it loads.
        register: join ``stats_tracker.export_all`` (False: pass it to ``export_sources``).
        gpu: the GPU reader to use instead of NVML's (its readings' names as
            :meth:`~telemetry.metrics.nvml.NvmlDevice.read` gives them).
    """

    source_id = "hardware"

    def __init__(
        self,
        phase_memory: bool = True,
        nvml: bool = True,
        register: bool = True,
        gpu: GpuReader | None = None,
    ) -> None:
        readers: list[ProcessMemory | CudaMemory] = [ProcessMemory()]
        if CudaMemory.in_use():
            readers.append(CudaMemory())
        self._peaks = Peaks(readers)
        self._gpu = gpu if gpu is not None else open_device() if nvml else None
        self._phase_memory = phase_memory
        self._states = DeclaredStates(PREFIX)
        self._closed = False
        self.failures = 0
        if phase_memory:
            phase.add_listener(self._on_phase)
        stats_tracker.rank_series(PATTERN)
        if register:
            register_source(self)

    def _on_phase(self, name: str, entering: bool) -> None:
        try:
            self._peaks.phase(name, entering)
        except Exception as exc:  # never raised into the training loop; logged once
            self.failures += 1
            if self.failures == 1:
                _log.warning("hardware: phase memory peaks failed (%s); counted from now on", exc)

    def _readings(self) -> dict[str, float]:
        try:
            window, phases = self._peaks.take()
        except Exception as exc:  # the other ranks still reduce: this rank sends no memory
            self.failures += 1
            _log.warning("hardware: memory readings failed (%s)", exc)
            window, phases = {}, {}
        out = {f"hardware/memory/{name}": value for name, value in window.items()}
        for name, peaks in sorted(phases.items()):
            out.update((f"hardware/phase/{name}/{k}", v) for k, v in peaks.items())
        if self._gpu is not None:
            try:
                gpu = self._gpu.read()
            except Exception:  # a GPU that stops answering: no readings this window
                gpu = {}
            out.update((f"hardware/gpu/{name}", value) for name, value in gpu.items())
        return out

    def collect(self, key: str | None = None, reset: bool = True) -> Collected:
        """Each reading of this export as ``[value, 1, value, -value]`` (sum, count, min,
        -max), its state declared at its first sight; a new window either way (``key`` is a
        tracker's filter: ignored)."""
        values = {}
        for full, v in self._readings().items():
            name = full.removeprefix(PREFIX)
            if name not in self._states:
                self._states.add_state(name, STAT_OPS, per_rank=_PER_RANK)
            values[name] = torch.tensor([v, 1.0, v, -v], dtype=torch.float64)
        return Collected(self._states.states(values))

    def build_points(self, reduced: Reduced) -> list[Point]:
        """The mean over the ranks of each reading (those of other ranks' keys too)."""
        points: list[Point] = []
        for name, values in sorted(self._states.values(reduced).items()):
            if values[1] > 0:
                points.append(Gauge(PREFIX + name, float(values[0] / values[1])))
        return points

    def reset(self) -> None:
        """Nothing to clear: every export reads a new window."""

    def close(self) -> None:
        """Leave ``export_all`` and stop the phase peaks; safe twice."""
        if self._closed:
            return
        self._closed = True
        phase.remove_listener(self._on_phase)
        unregister_source(self)
