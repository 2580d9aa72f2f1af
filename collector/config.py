"""Collector configuration: receiver, auth, limits and sinks, as frozen dataclasses.

One YAML file, validated at start: an unknown key, a bad port, a missing certificate or
token file fails with a :class:`~telemetry.errors.ConfigError` naming the full key
(``collector.receiver.port``). The ``sinks`` section takes the StatsLogger's sink sections
unchanged (``wandb``, ``swanlab``, ``tensorboard``, ``prometheus``, ``console``, ``fileroot``);
each run (experiment/trial) seen by the collector gets its own W&B/SwanLab/TensorBoard sink
built from them, and one Prometheus endpoint serves every run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telemetry.config import (
    ConsoleConfig,
    PrometheusConfig,
    StatsLoggerConfig,
    SwanlabConfig,
    TensorBoardConfig,
    WandBConfig,
    from_mapping,
    public_dict,
)
from telemetry.errors import ConfigError

ROOT = "collector"


@dataclass(frozen=True)
class TlsConfig:
    """Server TLS from PEM files; both empty means plaintext (loopback only by default)."""

    cert_file: str | None = None
    key_file: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file or self.key_file)

    def validate(self, path: str) -> None:
        if not self.enabled:
            return
        for name in ("cert_file", "key_file"):
            value = getattr(self, name)
            if not value:
                raise ConfigError(f"{path}.{name} is required when TLS is configured")
            if not Path(value).is_file():
                raise ConfigError(f"{path}.{name}: no such file {value!r}")


@dataclass(frozen=True)
class ReceiverConfig:
    """The OTLP/gRPC endpoint; binding beyond loopback is an explicit choice."""

    host: str = "127.0.0.1"
    port: int = 4317
    max_message_bytes: int = 4 * 1024 * 1024
    max_workers: int = 4
    tls: TlsConfig = field(default_factory=TlsConfig)

    def validate(self, path: str) -> None:
        _port(f"{path}.port", self.port)
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"{path}.host must be a non-empty host name, got {self.host!r}")
        _positive_int(f"{path}.max_message_bytes", self.max_message_bytes)
        _positive_int(f"{path}.max_workers", self.max_workers)
        self.tls.validate(f"{path}.tls")


@dataclass(frozen=True)
class AuthConfig:
    """Optional bearer token, given inline or (preferably) in a file; neither means no auth."""

    bearer_token: str | None = None
    token_file: str | None = None

    def validate(self, path: str) -> None:
        if self.bearer_token and self.token_file:
            raise ConfigError(f"{path}: set bearer_token or token_file, not both")
        if self.token_file and not Path(self.token_file).is_file():
            raise ConfigError(f"{path}.token_file: no such file {self.token_file!r}")
        if self.token_file and not Path(self.token_file).read_text().strip():
            raise ConfigError(f"{path}.token_file: {self.token_file!r} is empty")

    def token(self) -> str | None:
        """The expected token, read from ``token_file`` when that is set."""
        if self.token_file:
            return Path(self.token_file).read_text().strip()
        return self.bearer_token or None


@dataclass(frozen=True)
class LimitsConfig:
    """Bounds that keep the collector's memory finite under any load.

    ``memory_limit_bytes`` bounds the bytes of accepted requests whose snapshots still wait
    in a sink queue; past it (or past ``max_concurrent_requests``) senders get a retryable
    status and retry or spool.
    """

    max_series_per_metric: int = 2000
    max_runs: int = 32
    memory_limit_bytes: int = 256 * 1024 * 1024
    queue_size: int = 1024
    max_concurrent_requests: int = 32
    sink_timeout_s: float = 10.0
    drain_timeout_s: float = 30.0

    def validate(self, path: str) -> None:
        for name in (
            "max_series_per_metric",
            "max_runs",
            "memory_limit_bytes",
            "queue_size",
            "max_concurrent_requests",
        ):
            _positive_int(f"{path}.{name}", getattr(self, name))
        for name in ("sink_timeout_s", "drain_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{path}.{name} must be a number > 0, got {value!r}")


def _prometheus_on() -> PrometheusConfig:
    return PrometheusConfig(enabled=True)


def _console_off() -> ConsoleConfig:
    return ConsoleConfig(enabled=False)


@dataclass(frozen=True)
class SinksConfig:
    """The StatsLogger's sink sections; Prometheus is on unless ``enabled: false``."""

    fileroot: str = "runs"
    wandb: WandBConfig = field(default_factory=WandBConfig)
    swanlab: SwanlabConfig = field(default_factory=SwanlabConfig)
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    prometheus: PrometheusConfig = field(default_factory=_prometheus_on)
    console: ConsoleConfig = field(default_factory=_console_off)

    def validate(self, path: str) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f"{path}.{f.name}")

    def logger_config(self, experiment: str, trial: str) -> StatsLoggerConfig:
        """The StatsLogger config of one run: these sinks with its experiment and trial."""
        return StatsLoggerConfig(
            experiment_name=experiment,
            trial_name=trial,
            fileroot=self.fileroot,
            wandb=self.wandb,
            swanlab=self.swanlab,
            tensorboard=self.tensorboard,
            prometheus=self.prometheus,
            console=self.console,
        )


@dataclass(frozen=True)
class CollectorConfig:
    """The whole collector: ``receiver``, ``auth``, ``limits``, ``sinks``."""

    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)

    def validate(self, path: str = ROOT) -> None:
        """Check every section.

        Raises:
            ConfigError: the first invalid value, naming its full key.
        """
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate(f"{path}.{f.name}")


def default_config() -> CollectorConfig:
    """The configuration used when no file is given (loopback, Prometheus on :9464)."""
    return CollectorConfig()


def from_dict(data: Mapping[str, Any] | None) -> CollectorConfig:
    """A validated config from a mapping (a parsed YAML document).

    The mapping may be the config itself or a document with a ``collector`` key.

    Raises:
        ConfigError: unknown key, wrong section type or invalid value, naming the key.
    """
    if isinstance(data, Mapping) and set(data) == {ROOT}:
        data = data[ROOT]
    data = _prometheus_default_on(data)
    config = from_mapping(CollectorConfig, data, ROOT)
    config.validate()
    return config


def _prometheus_default_on(data: Any) -> Any:
    """In the collector, ``sinks.prometheus`` without ``enabled`` means enabled and
    ``sinks.console`` without ``enabled`` means disabled."""
    sinks = data.get("sinks") if isinstance(data, Mapping) else None
    if not isinstance(sinks, Mapping):
        return data
    sinks = dict(sinks)
    for name, enabled in (("prometheus", True), ("console", False)):
        section = sinks.get(name)
        if isinstance(section, Mapping) and "enabled" not in section:
            sinks[name] = {"enabled": enabled, **section}
    return {**data, "sinks": sinks}


def load(path: str | Path) -> CollectorConfig:
    """A validated config from a YAML file.

    Raises:
        ConfigError: the file is missing or not YAML, or holds an invalid config.
    """
    import yaml

    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read collector config {str(path)!r}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"collector config {str(path)!r} is not valid YAML: {exc}") from None
    try:
        return from_dict(document)
    except TypeError as exc:  # a scalar where a section was expected, etc.
        raise ConfigError(f"collector config {str(path)!r}: {exc}") from None


def to_yaml(config: CollectorConfig) -> str:
    """The effective configuration as YAML, secrets removed."""
    import yaml

    return yaml.safe_dump({ROOT: public_dict(config)}, sort_keys=False)


def _port(path: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"{path} must be a port number 0..65535, got {value!r}")


def _positive_int(path: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{path} must be an integer >= 1, got {value!r}")
