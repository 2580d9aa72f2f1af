"""The typed config schema: AReaL's ``stats_logger`` section, each sink's section, ``otlp``.

Every section is a frozen pydantic dataclass with strict types, ranges and cross-field
rules written here once; the collector reuses the sink sections (:class:`SinkSections`,
their one declaration) with its own defaults (:mod:`collector.config`). :func:`load_config`
accepts every AReaL form (mapping, YAML path, ``DictConfig``, AReaL dataclass instance,
whole experiment config; ``${...}`` resolved by OmegaConf) and raises :class:`ConfigError`
naming the full key, the value and what was expected. AReaL keys rltel does not implement
(``trackio``, ...) are dropped with one warning. Secrets are ``SecretStr``: hidden in
``repr``; :func:`public_dict` removes them (or shows ``<set>``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, SecretStr, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config.read import (
    SECRET_KEYS,
    FieldRule,
    check_ca_file,
    check_cert_pair,
    check_endpoint,
    read_section,
    to_plain,
    validate,
)
from telemetry.model.errors import ConfigError

__all__ = [
    "AREAL_IGNORED",
    "SCHEMA",
    "SWANLAB_DIR",
    "TENSORBOARD_DIR",
    "WANDB_DIR",
    "ConfigError",
    "ConsoleConfig",
    "HardwareConfig",
    "HeartbeatConfig",
    "LabelLimits",
    "OtlpConfig",
    "OtlpTlsConfig",
    "PrometheusConfig",
    "SamplesConfig",
    "SinkSections",
    "StatsLoggerConfig",
    "SwanlabConfig",
    "TensorBoardConfig",
    "TracingConfig",
    "WandBConfig",
    "load_config",
    "load_experiment",
    "public_dict",
]

SCHEMA = ConfigDict(extra="forbid")
"""Every section: unknown keys fail (strictness comes from the Strict* field types)."""

AREAL_IGNORED: dict[str, frozenset[str]] = {
    "": frozenset({"trackio"}),
    "wandb": frozenset({"system_metrics"}),
}
"""AReaL ``stats_logger`` keys rltel does not implement: accepted with one warning."""

OptStr = StrictStr | None

TENSORBOARD_DIR, WANDB_DIR, SWANLAB_DIR = "tensorboard", "wandb", "swanlog"
"""The file sinks' directories in a run directory (:attr:`StatsLoggerConfig.run_dir`)."""


@dataclass(frozen=True, config=SCHEMA)
class WandBConfig:
    """AReaL's ``stats_logger.wandb``; every W&B mode AReaL passes to ``wandb.init``."""

    mode: Literal["online", "offline", "disabled", "shared"] = "disabled"
    wandb_base_url: StrictStr = ""
    wandb_api_key: SecretStr | None = SecretStr("")
    entity: OptStr = None
    project: OptStr = None
    name: OptStr = None
    job_type: OptStr = None
    group: OptStr = None
    notes: OptStr = None
    tags: tuple[StrictStr, ...] | None = None
    config: dict[StrictStr, Any] | None = None
    id_suffix: OptStr = "train"


@dataclass(frozen=True, config=SCHEMA)
class SwanlabConfig:
    """AReaL's ``stats_logger.swanlab``; ``mode`` is cloud/online, local, offline or disabled."""

    project: OptStr = None
    name: OptStr = None
    config: dict[StrictStr, Any] | None = None
    logdir: OptStr = None
    mode: Literal["cloud", "online", "local", "offline", "disabled"] = "disabled"
    api_key: SecretStr | None = None


@dataclass(frozen=True, config=SCHEMA)
class TensorBoardConfig:
    """AReaL's ``stats_logger.tensorboard``; ``path: null`` disables it."""

    path: OptStr = None


@dataclass(frozen=True, config=SCHEMA)
class PrometheusConfig:
    """The Prometheus exposition sink; disabled unless ``enabled``.

    Attributes:
        cert_file: serve HTTPS with this PEM certificate (with ``key_file``; default: HTTP);
            checked with its key when the config is read.
        key_file: the certificate's unencrypted PEM private key.
        token_file: a file holding a bearer token every request must send
            (``Authorization: Bearer <token>``, Prometheus's
            ``authorization.credentials_file``); others get 401. Default: no token.
    """

    enabled: StrictBool = False
    host: StrictStr = Field(default="127.0.0.1", min_length=1)
    port: StrictInt = Field(default=9464, ge=0, le=65535)
    series_limit: StrictInt = Field(default=2000, ge=1)
    expire_seconds: StrictFloat = Field(default=600.0, gt=0)
    cert_file: OptStr = None
    key_file: OptStr = None
    token_file: OptStr = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise FieldRule(missing, "is required: cert_file and key_file go together")
        if self.cert_file:
            check_cert_pair(self.cert_file, self.key_file)
        if self.token_file is not None and not self.token():
            raise FieldRule("token_file", f"names no file, or an empty one: {self.token_file!r}")

    def token(self) -> str | None:
        """The bearer token read from ``token_file`` (None: none set, or it is unreadable)."""
        if self.token_file is None:
            return None
        try:
            return Path(self.token_file).read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None


@dataclass(frozen=True, config=SCHEMA)
class ConsoleConfig:
    """The per-step console table (rank 0 only); on by default, as AReaL prints its stats."""

    enabled: StrictBool = True
    width: StrictInt | None = Field(default=None, ge=24)


@dataclass(frozen=True, config=SCHEMA)
class OtlpTlsConfig:
    """Client TLS for the OTLP channel: a CA to trust, and a client cert/key pair."""

    ca_file: OptStr = None
    cert_file: OptStr = None
    key_file: OptStr = None

    @property
    def enabled(self) -> bool:
        """True when a file is set; an empty section leaves the channel as ``insecure`` says."""
        return bool(self.ca_file or self.cert_file or self.key_file)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise FieldRule(missing, "is required: cert_file and key_file go together")
        if self.ca_file:
            check_ca_file("ca_file", self.ca_file)
        if self.cert_file:
            check_cert_pair(self.cert_file, self.key_file)


@dataclass(frozen=True, config=SCHEMA)
class OtlpConfig:
    """Where and how to send OTLP/gRPC; no ``endpoint`` means the embedded default."""

    endpoint: OptStr = None
    insecure: StrictBool = True
    tls: OtlpTlsConfig | None = None
    headers: dict[StrictStr, SecretStr] | None = None
    timeout: StrictFloat = Field(default=10.0, gt=0)
    queue_size: StrictInt = Field(default=1024, ge=1)
    spool_dir: OptStr = None
    spool_limit_bytes: StrictInt = Field(default=256 * 1024 * 1024, ge=0)
    max_points_per_request: StrictInt = Field(default=5000, ge=4)

    def __post_init__(self) -> None:
        if self.endpoint:
            check_endpoint("endpoint", self.endpoint)
        else:
            for name in ("tls", "headers"):
                if getattr(self, name):
                    raise FieldRule(name, "is set but otlp.endpoint is not (nothing to send to)")

    def plain_headers(self) -> dict[str, str] | None:
        """The headers with their secret values, for the transport only."""
        if not self.headers:
            return None
        return {key: value.get_secret_value() for key, value in self.headers.items()}


@dataclass(frozen=True, config=SCHEMA)
class SamplesConfig:
    """Bounded rollout samples (``telemetry.samples.log_sample``), per step and stream.

    The StatsLogger bounds what it sends with it; the collector (``sinks.samples``) bounds
    what it receives again with its own, whatever the senders send.

    Attributes:
        enabled: keep logged (in the collector: received) samples and hand them to the
            sinks at each step.
        reservoir: samples kept uniformly at random per step and stream.
        extremes: samples with the lowest and, as many, the highest ``reward_key`` kept
            besides.
        max_text_bytes: a text field longer than this (UTF-8) is cut and marked.
        reward_key: the numeric field that orders the extremes.
        jsonl: each run's sinks also write ``<run_dir>/samples.jsonl`` (embedded, or in
            the collector).
    """

    enabled: StrictBool = True
    reservoir: StrictInt = Field(default=16, ge=0)
    extremes: StrictInt = Field(default=2, ge=0)
    max_text_bytes: StrictInt = Field(default=4096, ge=64)
    reward_key: StrictStr = Field(default="reward", min_length=1)
    jsonl: StrictBool = True


@dataclass(frozen=True, config=SCHEMA)
class SinkSections:
    """The sink sections the StatsLogger and the collector share, and the root of run files.

    :class:`StatsLoggerConfig` adds the run's names and ``otlp``; the collector's ``sinks``
    section (:class:`collector.config.SinksConfig`) its own defaults and ``remote_write``.

    Attributes:
        samples: bounded rollout samples per step and stream.
    """

    fileroot: StrictStr = Field(default="runs", min_length=1)
    wandb: WandBConfig = field(default_factory=WandBConfig)
    swanlab: SwanlabConfig = field(default_factory=SwanlabConfig)
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    samples: SamplesConfig = field(default_factory=SamplesConfig)

    def shared_sections(self) -> dict[str, Any]:
        """The sections of :class:`SinkSections` as this config holds them, by key."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(SinkSections)}


@dataclass(frozen=True, config=SCHEMA)
class LabelLimits:
    """Bounds on names and labels, after Prometheus's ``label_limit``,
    ``label_name_length_limit`` and ``label_value_length_limit``: keys of the collector's
    ``limits`` section (:class:`collector.config.LimitsConfig`), read by the OTLP decoder.

    A value's length is that of its text form (arrays and maps as ``[a,b]``/``{k=v}``,
    bytes as hex); points over a limit are rejected, naming it, and counted.
    """

    max_attributes_per_point: StrictInt = Field(default=128, ge=1)
    max_attribute_key_length: StrictInt = Field(default=256, ge=1)
    max_attribute_value_length: StrictInt = Field(default=4096, ge=1)
    max_metric_name_length: StrictInt = Field(default=1024, ge=1)


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


@dataclass(frozen=True, config=SCHEMA)
class StatsLoggerConfig(SinkSections):
    """AReaL's ``stats_logger`` section plus rltel's ``prometheus``, ``console``, ``otlp``.

    Attributes:
        heartbeat: each rank's heartbeat (the stuck-rank alert).
        hardware: memory and GPU health per rank.
        tracing: spans of ``perf_tracer`` calls and ``record_timing`` scopes.
    """

    experiment_name: StrictStr = Field(default="default", min_length=1)
    trial_name: StrictStr = Field(default="default", min_length=1)
    otlp: OtlpConfig = field(default_factory=OtlpConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)

    def __post_init__(self) -> None:
        for name in ("experiment_name", "trial_name"):
            if "/" in getattr(self, name):
                raise FieldRule(name, "must not contain '/' (it names a directory)")

    @property
    def run_dir(self) -> Path:
        """``<fileroot>/<experiment>/<trial>``: where this run's local files live.

        W&B writes ``wandb/`` here, SwanLab ``swanlog/`` (unless ``swanlab.logdir`` is set),
        the OTLP sink its ``otlp-spool/``; TensorBoard writes to ``tensorboard.path``, which
        keeps the run in one directory when it is ``<run_dir>/tensorboard`` (the collector
        always puts it there).
        """
        return Path(self.fileroot) / self.experiment_name / self.trial_name


def load_config(source: Any) -> StatsLoggerConfig:
    """A validated :class:`StatsLoggerConfig` from any AReaL form (see :func:`load_experiment`).

    Raises:
        ConfigError: naming every invalid key, its value and what was expected.
    """
    return load_experiment(source)[0]


def load_experiment(source: Any) -> tuple[StatsLoggerConfig, dict[str, Any]]:
    """The validated section and the experiment config to log with the run (secrets removed).

    ``source``: a :class:`StatsLoggerConfig`, ``None``, a mapping, a YAML path, an OmegaConf
    ``DictConfig`` or an AReaL dataclass instance, holding the ``stats_logger`` section or
    the whole experiment config (found by its ``stats_logger`` key). The second value is the
    whole experiment config (or the section) as plain data, every secret removed and the
    ``stats_logger`` section replaced by its validated form.

    Raises:
        ConfigError: an invalid key or value, an unresolvable ``${...}``, an unreadable file.
    """
    if isinstance(source, StatsLoggerConfig):
        return source, public_dict(source)
    section, whole = read_section(source, "stats_logger")
    config = validate(StatsLoggerConfig, section, "stats_logger", AREAL_IGNORED)
    if whole is None:
        return config, public_dict(config)
    experiment = _without_secrets(whole)
    experiment["stats_logger"] = public_dict(config)
    return config, experiment


def public_dict(config: Any, secrets: Literal["omit", "mark"] = "omit") -> dict[str, Any]:
    """The config as plain data; secrets omitted, or shown as ``<set>`` (``mark``) when set."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if _is_secret(value) or (value is None and f.name in SECRET_KEYS):
            if secrets == "mark":
                out[f.name] = None if value is None else _mark(value)
            continue
        if dataclasses.is_dataclass(value):
            value = public_dict(value, secrets)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _is_secret(value: Any) -> bool:
    if isinstance(value, SecretStr):
        return True
    return isinstance(value, dict) and any(isinstance(v, SecretStr) for v in value.values())


def _mark(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "<set>" if value.get_secret_value() else ""
    return {key: "<set>" for key in value}


def _without_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_secrets(v) for k, v in value.items() if k not in SECRET_KEYS}
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return to_plain(value)
