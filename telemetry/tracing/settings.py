"""What one process's tracer does, resolved from AReaL's ``perf_tracer`` config or rltel's
``stats_logger.tracing`` section.

:func:`resolve` reads either by attribute: AReaL's ``PerfTracerConfig`` (``enabled``,
``fileroot``, ``experiment_name``, ``trial_name``, ``save_interval``, ``session_tracer``)
places files where AReaL does; rltel's ``TracingConfig`` (``sample_rate``, ``record_timing``,
``sessions``, ``max_queue``) places them under the directory the StatsLogger gives.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemetry.config.log_path import areal_log_dir
from telemetry.model.errors import ConfigError
from telemetry.tracing.ranks import rank_selected

__all__ = ["SESSION_FILE", "TRACE_FILE", "TraceSettings", "resolve"]

TRACE_FILE = "traces.jsonl"
SESSION_FILE = "sessions.jsonl"


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """One process's tracer, resolved.

    Attributes:
        enabled: record spans at all (the config enables it and AREAL_PERF_TRACER_RANKS
            selects the rank, :mod:`telemetry.tracing.ranks`).
        rank: this process's rank (``rltel.rank``).
        role: this process's role (``rltel.role``), ``None`` when not given.
        trace_path: the Chrome trace file (embedded mode).
        session_path: the sessions file; ``None`` when session tracing is off.
        session_flush_threshold: finished sessions written together.
        save_interval: ``save(step=s)`` flushes when ``(s + 1) % save_interval == 0``.
        sample_rate: spans per second kept (a token bucket of one second's spans); ``None``
            keeps every span.
        record_timing: each ``record_timing`` scope is a span too.
        max_queue: spans waiting for export at most; more are dropped and counted.
        experiment: the run's experiment name (resource attribute), if known.
        trial: the run's trial name (resource attribute), if known.
        resource: more resource attributes (the StatsLogger's: run, role, rank, worker),
            over the ones above.
    """

    enabled: bool
    rank: int
    role: str | None
    trace_path: Path
    session_path: Path | None
    session_flush_threshold: int = 256
    save_interval: int = 1
    sample_rate: float | None = None
    record_timing: bool = True
    max_queue: int = 8192
    experiment: str | None = None
    trial: str | None = None
    resource: tuple[tuple[str, Any], ...] = ()


def _areal_base(config: Any) -> Path:
    """AReaL's directory: ``<fileroot>/logs/<user>/<experiment>/<trial>``."""
    fileroot = os.path.expanduser(os.path.expandvars(str(config.fileroot)))
    return Path(areal_log_dir(fileroot, config.experiment_name, config.trial_name))


def _rank_file(base: Path, subdir: str, role: str | None, filename: str, rank: int) -> Path:
    """``<base>/<subdir>[/<role>]/<stem>-r<rank><suffix>``, AReaL's per-rank file name."""
    stem, suffix = os.path.splitext(filename)
    folder = base / subdir / role if role else base / subdir
    return folder / f"{stem}-r{rank}{suffix}"


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"perf_tracer.{key}: expected an integer, got {value!r}")
    return max(value, 1)  # AReaL: values <= 0 fall back to 1


def resolve(
    config: Any,
    *,
    rank: int,
    role: str | None = None,
    output_dir: str | Path | None = None,
    resource: tuple[tuple[str, Any], ...] = (),
) -> TraceSettings:
    """The settings for ``config`` on ``rank``/``role``; files under ``output_dir`` when
    given, else under AReaL's directory for the config's fileroot, experiment and trial;
    ``resource``: more resource attributes.

    Raises:
        ConfigError: a negative rank, or a value of the wrong type or range (naming the key).
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ConfigError(f"perf_tracer rank must be a non-negative integer, got {rank!r}")
    base = Path(output_dir) if output_dir is not None else _areal_base(config)
    session = getattr(config, "session_tracer", None)
    if session is not None:  # AReaL's nested SessionTracerConfig
        sessions, threshold = bool(session.enabled), session.flush_threshold
    else:
        sessions = bool(getattr(config, "sessions", False))
        threshold = getattr(config, "session_flush_threshold", 256)
    rate = getattr(config, "sample_rate", None)
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, (int, float))
        or not math.isfinite(rate)
        or rate <= 0
    ):
        raise ConfigError(f"perf_tracer.sample_rate: expected spans per second > 0, got {rate!r}")
    max_queue = getattr(config, "max_queue", 8192)
    if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
        raise ConfigError(f"perf_tracer.max_queue: expected an integer >= 1, got {max_queue!r}")
    return TraceSettings(
        enabled=bool(getattr(config, "enabled", False)) and rank_selected(rank),
        rank=rank,
        role=role,
        trace_path=_rank_file(base, "perf_tracer", role, TRACE_FILE, rank),
        session_path=(
            _rank_file(base, "session_tracer", role, SESSION_FILE, rank) if sessions else None
        ),
        session_flush_threshold=_positive_int(threshold, "session_tracer.flush_threshold"),
        save_interval=_positive_int(getattr(config, "save_interval", 1), "save_interval"),
        sample_rate=None if rate is None else float(rate),
        record_timing=bool(getattr(config, "record_timing", True)),
        max_queue=max_queue,
        experiment=getattr(config, "experiment_name", None),
        trial=getattr(config, "trial_name", None),
        resource=tuple(resource),
    )
