"""The typed config schema: AReaL's ``stats_logger`` section, each sink's section, ``otlp``.

Every section is a frozen pydantic dataclass with strict types, ranges and cross-field
rules written here once; the collector reuses the sink sections (:class:`SinkSections`,
their one declaration) with its own defaults (:mod:`collector.config`). :func:`load_config`
accepts every AReaL form (mapping, YAML path, ``DictConfig``, AReaL dataclass instance,
whole experiment config; ``${...}`` resolved by OmegaConf) and raises :class:`ConfigError`
naming the full key, the value and what was expected. AReaL keys rltel does not implement
(``wandb.system_metrics``) are dropped with one warning. Secrets are ``SecretStr``: hidden in
``repr``; :func:`public_dict` removes them (or shows ``<set>``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config.rank import HardwareConfig, HeartbeatConfig, TracingConfig
from telemetry.config.read import (
    SECRET_KEYS,
    FieldRule,
    read_section,
    to_plain,
    validate,
)
from telemetry.config.schema import SCHEMA
from telemetry.config.sinks import (
    SWANLAB_DIR,
    TENSORBOARD_DIR,
    TRACKIO_DIR,
    WANDB_DIR,
    ConsoleConfig,
    LabelLimits,
    OtlpConfig,
    OtlpTlsConfig,
    PrometheusConfig,
    SamplesConfig,
    SinkSections,
    SwanlabConfig,
    TensorBoardConfig,
    TrackioConfig,
    WandBConfig,
)
from telemetry.model.errors import ConfigError

__all__ = [
    "AREAL_IGNORED",
    "SCHEMA",
    "SWANLAB_DIR",
    "TENSORBOARD_DIR",
    "TRACKIO_DIR",
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
    "TrackioConfig",
    "WandBConfig",
    "load_config",
    "load_experiment",
    "public_dict",
]

AREAL_IGNORED: dict[str, frozenset[str]] = {
    "wandb": frozenset({"system_metrics"}),
}
"""AReaL ``stats_logger`` keys rltel does not implement: accepted with one warning."""


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
        Trackio ``trackio/`` (unless ``trackio.dir`` is set),
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
