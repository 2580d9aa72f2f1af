"""The sections of what runs beside each rank: heartbeat, hardware sampling, tracing."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictFloat, StrictInt
from pydantic.dataclasses import dataclass

from telemetry.config.schema import SCHEMA, OptStr

__all__ = ["HardwareConfig", "HeartbeatConfig", "TracingConfig"]


@dataclass(frozen=True, config=SCHEMA)
class HeartbeatConfig:
    """Each rank's heartbeat: step, phase and last progress, out of band from the collectives.

    Attributes:
        enabled: every rank starts a heartbeat thread with its StatsLogger.
        interval_s: seconds between two beats of a rank.
        stall_floor_s: the stuck-rank alert waits at least this long without progress
            (exported as ``rltel_heartbeat_stall_floor_seconds``; the rule also waits 3
            median steps).
    """

    enabled: StrictBool = True
    interval_s: StrictFloat = Field(default=10.0, gt=0)
    stall_floor_s: StrictFloat = Field(default=120.0, gt=0)


@dataclass(frozen=True, config=SCHEMA)
class HardwareConfig:
    """Memory and GPU health per rank, sampled at export into the stats (``hardware/...``).

    Attributes:
        enabled: join ``export_all`` with each rank's memory peaks (per window and per
            ``record_timing`` phase) and, where NVML is there, its GPU readings.
        phase_memory: keep a memory peak per ``record_timing`` phase (a reset of the
            peak at each scope's entry and a read at its exit).
        nvml: read utilisation, memory, power, temperature, SM clock and throttle reasons
            through NVML (``pip install rltel[nvml]``) when it loads.
    """

    enabled: StrictBool = False
    phase_memory: StrictBool = True
    nvml: StrictBool = True


@dataclass(frozen=True, config=SCHEMA)
class TracingConfig:
    """Spans of this process: AReaL's ``perf_tracer`` calls and ``record_timing`` scopes
    (``telemetry.tracing``), configured by the StatsLogger on every rank and worker.

    Embedded, each rank writes AReaL's Chrome trace file (and sessions file) under
    ``output_dir``; with ``otlp.endpoint`` set, spans go to the collector through the OTLP
    sink's queue and spool instead.

    Attributes:
        enabled: configure this process's tracer with the StatsLogger.
        sample_rate: spans kept per second at most (a token bucket holding one second's
            spans; a span under a dropped one is dropped with it); unset keeps every span.
        record_timing: each ``record_timing`` scope is a span too (``timeperf/<key>``).
        sessions: AReaL's session tracer: ``sessions.jsonl`` and a span per rollout session
            and phase.
        session_flush_threshold: finished sessions written to the sessions file together.
        save_interval: ``perf_tracer.save(step=s)`` exports at every ``save_interval``-th step.
        output_dir: the root of the trace files (``perf_tracer/<role>/traces-r<rank>.jsonl``,
            ``session_tracer/...``); unset: ``<run_dir>/traces``.
        max_queue: ended spans waiting for export at most; more are dropped and counted.
    """

    enabled: StrictBool = False
    sample_rate: StrictFloat | None = Field(default=None, gt=0)
    record_timing: StrictBool = True
    sessions: StrictBool = True
    session_flush_threshold: StrictInt = Field(default=256, ge=1)
    save_interval: StrictInt = Field(default=1, ge=1)
    output_dir: OptStr = None
    max_queue: StrictInt = Field(default=8192, ge=1)
