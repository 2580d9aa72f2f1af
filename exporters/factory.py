"""What a sink package declares once: its :class:`SinkFactory`, built with a :class:`BuildContext`.

Each sink package (``exporters/<name>/``) exposes ``FACTORY``; :mod:`exporters.registry`
finds them and builds every sink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporters.base import Sink

__all__ = ["BuildContext", "SinkFactory"]


@dataclass(frozen=True)
class BuildContext:
    """What the process that builds the sinks adds to their config.

    Attributes:
        root: the key of the config section that holds the sinks' sections, named in errors
            (``stats_logger``; ``collector.sinks`` in the collector).
        run_name_suffix: the W&B run id suffix (``<experiment>_<trial>_<suffix>``) that
            replaces ``wandb.id_suffix`` (a rollout or eval stream's own run); None keeps it.
        own_process: run SwanLab and Trackio in a child process of their own (a process
            that serves several runs, like the collector: SwanLab allows one run per
            process, Trackio one data directory).
        experiment: the experiment config W&B, SwanLab and Trackio log with the run, secrets
            removed (AReaL logs the whole experiment config); default: the config's own.
        role: the sender's role (``trainer``, ``rollout``, ``eval``): a rollout or eval
            worker sends running totals over OTLP, and has a spool of its own.
        worker: the worker id (or rank) that names a rollout or eval worker's spool.
        start_unix_nano: the sender's start (OTLP health counters, running totals).
        otlp_options: extra :class:`~exporters.otlp.sink.OtlpSink` arguments (backoff,
            spool timing).
    """

    root: str = "stats_logger"
    run_name_suffix: str | None = None
    own_process: bool = False
    experiment: Mapping[str, Any] | None = None
    role: str = "trainer"
    worker: str = "0"
    start_unix_nano: int | None = None
    otlp_options: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SinkFactory:
    """A sink's entry in the registry.

    Attributes:
        name: the sink's name, and the key of its config section.
        switch: the key of that section that turns the sink on (named in warnings).
        enabled: whether a section (the sink's own) turns the sink on.
        create: the sink, from the config that holds its section and the build context.
        remote: the sink sends to the collector, which runs the others.
        shared: in the collector, one sink serves every run (else each run gets its own).
        companion: the sink accompanies those that log the metrics (``samples.jsonl``): a
            StatsLogger builds it only beside another sink, and it never counts as one
            that makes ``commit`` log (built after the others).
    """

    name: str
    switch: str
    enabled: Callable[[Any], bool]
    create: Callable[[Any, BuildContext], Sink]
    remote: bool = False
    shared: bool = False
    companion: bool = False

    def build(self, config: Any, context: BuildContext) -> Sink:
        """The sink, from ``create``, marked as built by this factory (found by it:
        :meth:`~exporters.fanout.FanOut.built_by`)."""
        sink = self.create(config, context)
        sink.factory = self
        return sink
