"""Collector configuration: receiver, auth, limits and sinks, in the one typed schema.

One YAML file, validated at start with the same rules as the StatsLogger's config
(:mod:`telemetry.config`): strict types and ranges, unknown keys rejected, errors naming the
full key (``collector.receiver.port``), the value and what was expected. The ``sinks``
section reuses the StatsLogger's sink sections (``wandb``, ``swanlab``, ``tensorboard``,
``prometheus``, ``console``, ``fileroot``) with the collector's own defaults (Prometheus on,
console off), plus ``remote_write`` (off by default); each run (experiment/trial) gets its
own W&B/SwanLab/TensorBoard sink built from them, and one Prometheus endpoint (and one
remote-write sink) serves every run. The bearer token is a secret:
hidden in ``repr``, shown as ``<set>`` by :func:`to_yaml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from collector.scrape.config import ScrapeConfig, ScrapeTarget
from collector.traces.config import TracesConfig
from exporters.remote_write.config import (
    RemoteWriteConfig,
)
from telemetry.config import (
    SCHEMA,
    ConsoleConfig,
    LabelLimits,
    PrometheusConfig,
    SinkSections,
    StatsLoggerConfig,
    public_dict,
)
from telemetry.config.read import FieldRule, check_cert_pair, read_section, validate
from telemetry.model.errors import ConfigError

ROOT = "collector"
OptStr = StrictStr | None


@dataclass(frozen=True, config=SCHEMA)
class _TlsConfig:
    """Server TLS from PEM files; both empty means plaintext (loopback only by default).

    Attributes:
        cert_file: server certificate (PEM file must exist); with ``key_file``
        key_file: server key (PEM file must exist); with ``cert_file``
    """

    cert_file: OptStr = None
    key_file: OptStr = None

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file or self.key_file)

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        for name in ("cert_file", "key_file"):
            if not getattr(self, name):
                raise FieldRule(name, "is required when TLS is configured")
        check_cert_pair(self.cert_file, self.key_file)


@dataclass(frozen=True, config=SCHEMA)
class _ReceiverConfig:
    """The OTLP/gRPC endpoint; binding beyond loopback is an explicit choice.

    Attributes:
        host: bind address; beyond loopback is an explicit choice
        port: OTLP/gRPC port
        max_message_bytes: largest request accepted
        max_workers: gRPC server threads
        tls: server TLS
    """

    host: StrictStr = Field(default="127.0.0.1", min_length=1)
    port: StrictInt = Field(default=4317, ge=0, le=65535)
    max_message_bytes: StrictInt = Field(default=4 * 1024 * 1024, ge=1)
    max_workers: StrictInt = Field(default=4, ge=1)
    tls: _TlsConfig = field(default_factory=_TlsConfig)


@dataclass(frozen=True, config=SCHEMA)
class _AuthConfig:
    """Optional bearer token, given inline or (preferably) in a file; neither means no auth.
    Senders send ``authorization: Bearer <token>``: the scheme in any case (RFC 7235), one or
    more spaces before the token, whitespace around the value ignored; a tab, or a space inside the
    token, is refused. A refused call is logged with the peer's address and the reason, at
    most once a minute per address. The gRPC health service (``grpc.health.v1.Health``) answers
    without a token: health probes (Kubernetes' gRPC probe, ``grpc_health_probe``) send none,
    and it tells only whether the collector serves; every Export call needs the token.

    Attributes:
        bearer_token: expected token, inline; secret
        token_file: file holding the token (preferred); not with ``bearer_token``
    """

    bearer_token: SecretStr | None = None
    token_file: OptStr = None

    def __post_init__(self) -> None:
        if self.bearer_token and self.token_file:
            raise FieldRule("token_file", "and bearer_token are both set: set one, not both")
        if self.token_file:
            path = Path(self.token_file)
            if not path.is_file():
                raise FieldRule("token_file", f"names no file: {self.token_file!r}")
            if not path.read_text().strip():
                raise FieldRule("token_file", f"names an empty file: {self.token_file!r}")

    def token(self) -> str | None:
        """The expected token, read from ``token_file`` when that is set."""
        if self.token_file:
            return Path(self.token_file).read_text().strip()
        return self.bearer_token.get_secret_value() if self.bearer_token else None


@dataclass(frozen=True, config=SCHEMA)
class LimitsConfig(LabelLimits):
    """Bounds that keep the collector's memory finite under any load.

    ``memory_limit_bytes`` bounds the bytes of accepted requests whose snapshots still wait
    in a sink queue; past it (or past ``max_concurrent_requests``) senders get a retryable
    status and retry or spool. The fields declared here are the pipeline's and the server's:
    what the pipeline holds (series state, runs, memory, queues, calls in flight, how long
    sinks and the drain at shutdown may take), the work one request may cause and concurrent
    heavy requests (admission: :mod:`collector.admission`, the server's heavy-request gate).
    The name and label bounds, one flat set of keys with these, come from
    :class:`~telemetry.config.LabelLimits`: the decoder takes the section as that.

    Attributes:
        max_points_per_request: data points in one request at most; more is refused with
            INVALID_ARGUMENT (split the request: retrying cannot help).
        max_decoded_bytes: estimated decoded size of one request at most (INVALID_ARGUMENT).
        heavy_request_bytes: a request larger than this on the wire is heavy: heavy requests
            run at most ``max_heavy_requests`` at a time, so small exports keep their latency.
        heavy_request_points: a request with more points than this is heavy too.
        max_heavy_requests: heavy requests parsed or decoded at once; one more is refused
            with RESOURCE_EXHAUSTED and a retry delay.
        max_spans_per_request: spans in one ``TraceService/Export`` request at most; more
            is refused with INVALID_ARGUMENT (split it). More than ``heavy_request_points``
            makes a trace or logs request heavy.
        max_log_records_per_request: log records in one ``LogsService/Export`` request
            at most (INVALID_ARGUMENT past it).
        retry_after_s: the retry delay suggested to refused senders
            (``grpc-retry-pushback-ms``).
        deadline_margin_s: a request with less time than this left before its deadline is
            not ingested.
    """

    max_series_per_metric: StrictInt = Field(default=2000, ge=1)
    max_runs: StrictInt = Field(default=32, ge=1)
    memory_limit_bytes: StrictInt = Field(default=256 * 1024 * 1024, ge=1)
    queue_size: StrictInt = Field(default=1024, ge=1)
    max_concurrent_requests: StrictInt = Field(default=32, ge=1)
    sink_timeout_s: StrictFloat = Field(default=10.0, gt=0)
    drain_timeout_s: StrictFloat = Field(default=30.0, gt=0)
    max_points_per_request: StrictInt = Field(default=50_000, ge=1)
    # of collector.admission.decoded_bytes, the estimate the memory budget is charged
    max_decoded_bytes: StrictInt = Field(default=32 * 1024 * 1024, ge=1)
    # 256 KiB: at 1 MiB, floods of 400 KB requests delayed small exports by 1-2 s
    heavy_request_bytes: StrictInt = Field(default=256 * 1024, ge=1)
    heavy_request_points: StrictInt = Field(default=10_000, ge=1)
    max_heavy_requests: StrictInt = Field(default=1, ge=1)
    max_spans_per_request: StrictInt = Field(default=50_000, ge=1)
    max_log_records_per_request: StrictInt = Field(default=50_000, ge=1)
    retry_after_s: StrictFloat = Field(default=0.5, ge=0)
    deadline_margin_s: StrictFloat = Field(default=0.005, ge=0)


@dataclass(frozen=True, config=SCHEMA)
class _CollectorPrometheusConfig(PrometheusConfig):
    """The StatsLogger's ``prometheus`` section; in the collector it is on by default."""

    enabled: StrictBool = True


@dataclass(frozen=True, config=SCHEMA)
class _CollectorConsoleConfig(ConsoleConfig):
    """The StatsLogger's ``console`` section; in the collector it is off by default."""

    enabled: StrictBool = False


@dataclass(frozen=True, config=SCHEMA)
class SinksConfig(SinkSections):
    """The StatsLogger's sink sections, with the collector's defaults."""

    prometheus: _CollectorPrometheusConfig = field(default_factory=_CollectorPrometheusConfig)
    console: _CollectorConsoleConfig = field(default_factory=_CollectorConsoleConfig)
    remote_write: RemoteWriteConfig = field(default_factory=RemoteWriteConfig)

    def logger_config(self, experiment: str, trial: str) -> StatsLoggerConfig:
        """The StatsLogger config of one run: these sinks with its experiment and trial."""
        return StatsLoggerConfig(
            experiment_name=experiment, trial_name=trial, **self.shared_sections()
        )


@dataclass(frozen=True, config=SCHEMA)
class _DurableConfig:
    """The durable queue: what the collector accepts is on disk, per sink, before it answers
    OK, replayed in order after a restart and deleted once the sink holds it.

    Attributes:
        enabled: journal every sink's snapshots (off: the queues live in memory only, and a
            killed collector loses what it had acknowledged but not delivered).
        directory: the state directory; default ``<sinks.fileroot>/.collector-state/<port>``
            (the receiver's bound port: collectors on other ports never share one).
        fsync: ``never``: each request's journal entries are written (in the page cache)
            before the answer, which survives a kill of the collector but not a crash of
            the machine, like the OTel Collector's file storage (``fsync: false``) and
            Prometheus's WAL; ``request``: also fsynced once per journal per request, which
            survives a crash of the machine at a measured cost (docs/BENCHMARKS.md).
        limit_bytes: one sink's journal at most; past it requests are refused (retryable)
            until the sink catches up.
    """

    enabled: StrictBool = True
    directory: OptStr = None
    fsync: Literal["never", "request"] = "never"
    limit_bytes: StrictInt = Field(default=1024 * 1024 * 1024, ge=1)

    def state_dir(self, fileroot: str, port: int) -> Path:
        """The state directory of a collector whose receiver is bound to ``port``."""
        if self.directory is not None:
            return Path(self.directory)
        return Path(fileroot) / ".collector-state" / str(port)


@dataclass(frozen=True, config=SCHEMA)
class CollectorConfig:
    """The whole collector: ``receiver``, ``auth``, ``limits``, ``sinks``, ``durable``,
    ``scrape``, ``traces``."""

    receiver: _ReceiverConfig = field(default_factory=_ReceiverConfig)
    auth: _AuthConfig = field(default_factory=_AuthConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)
    durable: _DurableConfig = field(default_factory=_DurableConfig)
    scrape: ScrapeConfig = field(default_factory=ScrapeConfig)
    traces: TracesConfig = field(default_factory=TracesConfig)


def default_config() -> CollectorConfig:
    """The configuration used when no file is given (loopback, Prometheus on :9464)."""
    return CollectorConfig()


def from_dict(data: Mapping[str, Any] | None) -> CollectorConfig:
    """A validated config from a mapping (a parsed YAML document), ``${...}`` resolved.

    The mapping may be the config itself or a document with a ``collector`` key.

    Raises:
        ConfigError: unknown key, wrong type or invalid value, naming the full key.
    """
    section, _ = read_section(data, ROOT)
    return validate(CollectorConfig, section, ROOT)


def load(path: str | Path) -> CollectorConfig:
    """A validated config from a YAML file.

    A file that sets nothing (empty, only comments, or ``collector:`` with nothing under it)
    is refused: it is most likely the wrong file, and no file at all gives the defaults.

    Raises:
        ConfigError: the file is missing, not YAML or empty, or holds an invalid config.
    """
    section, whole = read_section(Path(path), ROOT)
    if whole is None and section in ({}, {ROOT: None}):
        raise ConfigError(
            f"{ROOT}: {str(path)!r} sets nothing (an empty file, or {ROOT}: with no key under "
            f"it); write the {ROOT}: section, or leave out --config for the built-in defaults"
        )
    return validate(CollectorConfig, section, ROOT)


def to_yaml(config: CollectorConfig) -> str:
    """The effective configuration as YAML; a set secret shows as ``<set>``."""
    import yaml

    return yaml.safe_dump({ROOT: public_dict(config, secrets="mark")}, sort_keys=False)


__all__ = [
    "CollectorConfig",
    "ConfigError",
    "LimitsConfig",
    "RemoteWriteConfig",
    "ScrapeConfig",
    "ScrapeTarget",
    "SinksConfig",
    "TracesConfig",
    "default_config",
    "from_dict",
    "load",
    "to_yaml",
]
