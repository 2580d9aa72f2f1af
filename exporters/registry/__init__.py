"""The sink registry: each sink package declares its factory once; every sink is built here.

A folder of its own, above every sink package it loads by name (a plugin loaded by
``importlib`` counts as an import), so that the generic modules of ``exporters`` that the
sink packages import stay below them: no folder cycle.

A sink is a subpackage of ``exporters`` exposing ``FACTORY``, a :class:`SinkFactory` (as the
OpenTelemetry Collector's ``NewFactory``): its name, which is the key of its config section
(``stats_logger.<name>``, ``collector.sinks.<name>``: declared once in the config schema,
:class:`telemetry.config.SinkSections` for the sinks the StatsLogger and the collector
share), the key of that section that turns it on, and how to build it. :func:`factories`
finds every sink package; the StatsLogger, the collector's shared sinks and each run's sinks
are all built by :func:`build_sinks`, the ``samples.jsonl`` file (a companion of the others)
included. A config builds the sinks whose section it holds and turns on: only the
StatsLogger's config has ``otlp``, only the collector's ``remote_write``. Each sink knows the
factory that built it (:attr:`~exporters.base.Sink.factory`), which is how it is found.

A sink's package is imported only to ask it, and its optional library (``wandb``,
``swanlab``, ``tensorboard``) only when the sink is built, so a missing library fails only
for the configuration that enables it. A remote sink (OTLP, with ``otlp.endpoint`` set)
sends to the collector, which runs the other sinks: when one is on, only the remote ones
are built.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import pkgutil
from pathlib import Path
from typing import Any

from exporters.base import Sink
from exporters.factory import BuildContext, SinkFactory

__all__ = [
    "build_sinks",
    "enabled",
    "factories",
    "switch_keys",
]


@functools.cache
def factories() -> tuple[SinkFactory, ...]:
    """Every sink package's factory in the order sinks are built in: by name, the
    companions after the others."""
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent.parent)]):
        if info.ispkg and info.name != "registry":  # the registry's own folder: no sink
            factory = getattr(importlib.import_module(f"exporters.{info.name}"), "FACTORY", None)
            if isinstance(factory, SinkFactory):
                found.append(factory)
    return tuple(sorted(found, key=lambda factory: (factory.companion, factory.name)))


def enabled(
    config: Any, shared: bool | None = None, companions: bool | None = None
) -> list[SinkFactory]:
    """The factories of the sinks ``config`` turns on: those whose section it holds and
    enables; only the remote ones when one of those is on (the collector runs the others).

    Args:
        config: a config holding sink sections (:class:`~telemetry.config.SinkSections`).
        shared: only the collector's sinks that serve every run (True) or those each run
            gets (False); None: every sink.
        companions: only the companions (True) or only the others (False); None: both.
    """
    found = [
        factory
        for factory in factories()
        if (shared is None or factory.shared is shared)
        and hasattr(config, factory.name)
        and factory.enabled(getattr(config, factory.name))
    ]
    found = [factory for factory in found if factory.remote] or found
    return [factory for factory in found if companions is None or factory.companion is companions]


def switch_keys(config: Any, root: str, remote: bool) -> list[str]:
    """The full keys that turn on the sinks ``config`` has a section for (``remote``: the
    senders', else the in-process ones'), e.g. ``stats_logger.console.enabled``; not the
    companions' (they log nothing alone)."""
    return [
        f"{root}.{factory.name}.{factory.switch}"
        for factory in factories()
        if factory.remote is remote and not factory.companion and hasattr(config, factory.name)
    ]


def build_sinks(
    config: Any,
    context: BuildContext | None = None,
    shared: bool | None = None,
    companions: bool | None = None,
) -> list[Sink]:
    """Construct every sink that ``config`` enables (see :func:`enabled`), each marked with
    its factory.

    When one cannot be built, those built before it are shut down before the error is
    raised.

    Raises:
        ModuleNotFoundError: an enabled sink's library is not installed (the message names
            the ``pip install rltel[...]`` extra).
        ConfigError: a sink cannot start as configured (a Prometheus port in use).
    """
    context = context or BuildContext()
    built: list[Sink] = []
    try:
        for factory in enabled(config, shared, companions):
            built.append(factory.build(config, context))
    except BaseException:
        for sink in built:  # a sink that started (a bound Prometheus port) does not outlive
            with contextlib.suppress(Exception):
                sink.shutdown(timeout_s=1.0)
        raise
    return built
