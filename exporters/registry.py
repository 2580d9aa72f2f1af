"""The sink registry: every sink declares how its config enables it and how it is built.

Each sink package exposes a :class:`SinkFactory` as ``FACTORY``; :func:`build_sinks`
finds them through :data:`SINK_MODULES` (construction order) and builds the enabled ones.
A sink's package is imported only to ask it, and its optional library (``wandb``,
``swanlab``, ``tensorboard``) only when the sink is built, so a missing library fails only
for the configuration that enables it. A remote sink (OTLP, with ``otlp.endpoint`` set)
sends to the collector, which runs the other sinks: when one is enabled, only the remote
ones are built here.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporters.base import Sink
from telemetry.config import StatsLoggerConfig

__all__ = ["SINK_MODULES", "BuildContext", "SinkFactory", "build_sinks", "enabled_sinks"]

SINK_MODULES = (
    "exporters.console",
    "exporters.prometheus",
    "exporters.wandb",
    "exporters.swanlab",
    "exporters.tensorboard",
    "exporters.otlp",
)


@dataclass(frozen=True)
class BuildContext:
    """What the process that builds the sinks adds to their config.

    Attributes:
        run_name_suffix: the W&B run id suffix (``<experiment>_<trial>_<suffix>``) that
            replaces ``wandb.id_suffix`` (a rollout or eval stream's own run); None keeps it.
        swanlab_process: run SwanLab in a child process of its own (a process that serves
            several runs, like the collector: SwanLab allows one run per process).
        experiment: the experiment config W&B and SwanLab log with the run, secrets
            removed (AReaL logs the whole experiment config); default: the config's own.
        role: the sender's role (``trainer``, ``rollout``, ``eval``): a rollout or eval
            worker sends running totals over OTLP, and has a spool of its own.
        worker: the worker id (or rank) that names a rollout or eval worker's spool.
        start_unix_nano: the sender's start (OTLP health counters, running totals).
        otlp_options: extra :class:`~exporters.otlp.sink.OtlpSink` arguments (backoff,
            spool timing).
    """

    run_name_suffix: str | None = None
    swanlab_process: bool = False
    experiment: Mapping[str, Any] | None = None
    role: str = "trainer"
    worker: str = "0"
    start_unix_nano: int | None = None
    otlp_options: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SinkFactory:
    """A sink's entry in the registry: its name, when the config enables it, how to build it.

    ``remote``: the sink sends to the collector, which runs the others.
    """

    name: str
    enabled: Callable[[StatsLoggerConfig], bool]
    create: Callable[[StatsLoggerConfig, BuildContext], Sink]
    remote: bool = False


def _enabled(config: StatsLoggerConfig) -> list[SinkFactory]:
    found = [importlib.import_module(module).FACTORY for module in SINK_MODULES]
    found = [factory for factory in found if factory.enabled(config)]
    return [factory for factory in found if factory.remote] or found


def enabled_sinks(config: StatsLoggerConfig) -> list[str]:
    """Names of the sinks ``config`` enables, in construction order (only ``otlp`` when
    ``otlp.endpoint`` is set: the collector runs the others)."""
    return [factory.name for factory in _enabled(config)]


def build_sinks(config: StatsLoggerConfig, context: BuildContext | None = None) -> list[Sink]:
    """Construct every sink that ``config`` enables.

    When one cannot be built, those built before it are shut down before the error is
    raised.

    Raises:
        ModuleNotFoundError: an enabled sink's library is not installed (the message names
            the ``pip install rltel[...]`` extra).
    """
    context = context or BuildContext()
    built: list[Sink] = []
    try:
        for factory in _enabled(config):
            built.append(factory.create(config, context))
    except BaseException:
        for sink in built:  # a sink that started (a bound Prometheus port) does not outlive
            with contextlib.suppress(Exception):
                sink.shutdown(timeout_s=1.0)
        raise
    return built
