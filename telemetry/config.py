"""StatsLogger and sink configuration: AReaL's ``stats_logger`` YAML fields plus ``otlp``.

Every section is a frozen dataclass. :func:`load_config` builds one from a mapping or a
YAML file and fails on unknown keys, naming the full path (``stats_logger.wandb.mdoe``).
Secrets (``api_key``, ``wandb_api_key``, ``headers``) are excluded from :func:`public_dict`,
the form that may be logged or uploaded as run configuration.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from telemetry.errors import ConfigError

SECRET_FIELDS = frozenset({"api_key", "wandb_api_key", "headers", "token", "bearer_token"})


@dataclass(frozen=True)
class WandBConfig:
    """AReaL's ``stats_logger.wandb``; ``mode`` is online, offline or disabled."""

    mode: str = "disabled"
    wandb_base_url: str = ""
    wandb_api_key: str = ""
    entity: str | None = None
    project: str | None = None
    name: str | None = None
    job_type: str | None = None
    group: str | None = None
    notes: str | None = None
    tags: tuple[str, ...] | None = None
    config: dict | None = None
    id_suffix: str | None = "train"

    def validate(self, path: str) -> None:
        _one_of(path + ".mode", self.mode, ("online", "offline", "disabled"))


@dataclass(frozen=True)
class SwanlabConfig:
    """AReaL's ``stats_logger.swanlab``; ``mode`` is cloud/online, local, offline or disabled."""

    project: str | None = None
    name: str | None = None
    config: dict | None = None
    logdir: str | None = None
    mode: str = "disabled"
    api_key: str | None = None

    def validate(self, path: str) -> None:
        _one_of(path + ".mode", self.mode, ("cloud", "online", "local", "offline", "disabled"))


@dataclass(frozen=True)
class TensorBoardConfig:
    """AReaL's ``stats_logger.tensorboard``; ``path: null`` disables it."""

    path: str | None = None

    def validate(self, path: str) -> None:
        del path


@dataclass(frozen=True)
class PrometheusConfig:
    """The Prometheus exposition sink; disabled unless ``enabled``."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 9464
    series_limit: int = 2000
    expire_seconds: float = 600.0

    def validate(self, path: str) -> None:
        _port(path + ".port", self.port)
        if self.series_limit < 1:
            raise ConfigError(f"{path}.series_limit must be >= 1, got {self.series_limit}")


@dataclass(frozen=True)
class ConsoleConfig:
    """The per-step console table (rank 0 only); on by default, as AReaL prints its stats."""

    enabled: bool = True
    width: int | None = None

    def validate(self, path: str) -> None:
        del path


@dataclass(frozen=True)
class OtlpConfig:
    """Where and how to send OTLP/gRPC; no ``endpoint`` means the embedded default."""

    endpoint: str | None = None
    insecure: bool = True
    tls: dict | None = None
    headers: dict | None = None
    timeout: float = 10.0
    queue_size: int = 1024
    spool_dir: str | None = None
    spool_limit_bytes: int = 256 * 1024 * 1024
    max_points_per_request: int = 5000

    def validate(self, path: str) -> None:
        if self.timeout <= 0:
            raise ConfigError(f"{path}.timeout must be > 0, got {self.timeout}")
        if self.queue_size < 1:
            raise ConfigError(f"{path}.queue_size must be >= 1, got {self.queue_size}")
        if self.max_points_per_request < 1:
            raise ConfigError(f"{path}.max_points_per_request must be >= 1")


@dataclass(frozen=True)
class StatsLoggerConfig:
    """AReaL's ``stats_logger`` section, accepted as it is, plus rltel's sinks and ``otlp``."""

    experiment_name: str = "default"
    trial_name: str = "default"
    fileroot: str = "runs"
    wandb: WandBConfig = field(default_factory=WandBConfig)
    swanlab: SwanlabConfig = field(default_factory=SwanlabConfig)
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    otlp: OtlpConfig = field(default_factory=OtlpConfig)

    def validate(self, path: str = "stats_logger") -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f"{path}.{f.name}")

    @property
    def run_dir(self) -> Path:
        """``<fileroot>/<experiment>/<trial>``: where this run's local files live."""
        return Path(self.fileroot) / self.experiment_name / self.trial_name


def _one_of(path: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{path} must be one of {', '.join(allowed)}; got {value!r}")


def _port(path: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"{path} must be a port number 0..65535, got {value!r}")


T = TypeVar("T")


def from_mapping(cls: type[T], data: Mapping[str, Any] | None, path: str) -> T:
    """Build dataclass ``cls`` from ``data``, recursing into nested sections.

    Raises:
        ConfigError: an unknown key or a section that is not a mapping, naming its path.
    """
    if data is None:
        return cls()
    if dataclasses.is_dataclass(data) and isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown key {path}.{unknown[0]} (known: {', '.join(sorted(names))})")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            kwargs[name] = from_mapping(hint, value, f"{path}.{name}")
        elif _is_tuple_hint(hint) and isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _is_tuple_hint(hint: Any) -> bool:
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return any(typing.get_origin(arg) is tuple for arg in args)


def load_config(source: Mapping[str, Any] | str | Path | None) -> StatsLoggerConfig:
    """A validated :class:`StatsLoggerConfig` from a mapping, a YAML path, or ``None``.

    A YAML file may hold the section itself or a document with a ``stats_logger`` key.
    """
    if isinstance(source, StatsLoggerConfig):
        source.validate()
        return source
    if isinstance(source, (str, Path)):
        import yaml

        document = yaml.safe_load(Path(source).read_text()) or {}
        source = document.get("stats_logger", document)
    config = from_mapping(StatsLoggerConfig, source, "stats_logger")
    config.validate()
    return config


def public_dict(config: Any) -> dict[str, Any]:
    """The configuration as plain data with every secret field removed."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in SECRET_FIELDS:
            continue
        value = getattr(config, f.name)
        out[f.name] = public_dict(value) if dataclasses.is_dataclass(value) else value
    return out
