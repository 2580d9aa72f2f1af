"""Scrapes and trace durations into the collector's pipeline: the shared sinks, and the
run's step-based sinks.

Only the pipeline's public parts are used (its memory budget, the shared fan-out, the runs),
so a scrape is charged and queued as an admitted request's snapshots are and nothing of the
OTLP path changes. Nothing is reserved: a full sink queue drops the scrape and counts it
there (a scrape is not a sender's data that a retry would keep). Here, above the scrape
receiver (``collector/scrape/``) and the trace merge (``collector/traces/``), which take it
as a plain callable, so neither folder imports the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collector.admission import decoded_bytes
from collector.config import CollectorConfig
from collector.pipeline import Pipeline
from collector.traces.consumer import TraceMerge
from exporters.memory_charge import MemoryCharge
from telemetry.model.snapshot import Snapshot, Step

__all__ = ["PipelineDeliver", "trace_merge"]


class PipelineDeliver:
    """``(snapshot, figures_at) -> kept`` for :class:`~collector.scrape.target.TargetLoop`.

    ``snapshot`` goes to the shared sinks (Prometheus, remote write); ``figures_at(step)``,
    built under the run's lock at the run's latest training step (None before the first),
    goes to the run's W&B, SwanLab, TensorBoard and console sinks.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def __call__(
        self, snapshot: Snapshot, figures_at: Callable[[Step | None], Snapshot | None]
    ) -> bool:
        """Queue one scrape; False when the memory budget or a queue could not take it all."""
        budget = self.pipeline.budget
        nbytes = decoded_bytes((snapshot,))
        if not budget.acquire(nbytes):
            return False
        charge = MemoryCharge(nbytes, budget.release)
        try:
            kept = self.pipeline.shared.export(snapshot, charge) if snapshot.points else True
            run = self.pipeline.runs.of(snapshot)
            if run is None:
                return kept
            with run.lock:
                figures = figures_at(run.merger.step)
                if figures is not None:
                    kept = run.fanout.export(figures, charge) and kept
            return kept
        finally:
            charge.done()


def trace_merge(config: CollectorConfig, pipeline: Pipeline) -> TraceMerge:
    """The collector's trace merge: runs' directories as their sinks' (``sinks.fileroot``),
    the duration histograms into ``pipeline``'s shared sinks and runs, ``limits`` applied."""

    def run_dir(experiment: str, trial: str) -> Path:
        return config.sinks.logger_config(experiment, trial).run_dir

    limits = config.limits
    return TraceMerge(config.traces, run_dir, PipelineDeliver(pipeline), limits, limits.max_runs)
