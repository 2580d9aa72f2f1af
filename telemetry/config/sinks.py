"""The sink sections the StatsLogger and the collector share (:class:`SinkSections`), the
OTLP sender's section, and the label bounds the OTLP decoder reads."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config.read import (
    FieldRule,
    check_ca_file,
    check_cert_pair,
    check_endpoint,
)
from telemetry.config.schema import SCHEMA, OptStr

__all__ = [
    "SWANLAB_DIR",
    "TENSORBOARD_DIR",
    "TRACKIO_DIR",
    "WANDB_DIR",
    "ConsoleConfig",
    "LabelLimits",
    "OtlpConfig",
    "OtlpTlsConfig",
    "PrometheusConfig",
    "SamplesConfig",
    "SinkSections",
    "SwanlabConfig",
    "TensorBoardConfig",
    "TrackioConfig",
    "WandBConfig",
]

TENSORBOARD_DIR, WANDB_DIR, SWANLAB_DIR, TRACKIO_DIR = "tensorboard", "wandb", "swanlog", "trackio"
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
class TrackioConfig:
    """AReaL's ``stats_logger.trackio`` (Hugging Face's local-first tracker), plus ``dir``.

    Attributes:
        mode: ``local`` or ``online`` logs (both call ``trackio.init``, as AReaL does: where
            the data also goes is ``space_id``'s); ``disabled`` turns the sink off.
        project: the Trackio project; default: the experiment name.
        name: the run name; default: the trial name.
        space_id: a Hugging Face Space (``user/space``) the data is also pushed to; unset:
            local only (unless Trackio's own ``TRACKIO_SPACE_ID`` is set).
        dir: Trackio's data directory (its ``TRACKIO_DIR``: one SQLite file per project);
            default ``<fileroot>/<experiment>/<trial>/trackio``.
    """

    mode: Literal["online", "local", "disabled"] = "disabled"
    project: OptStr = None
    name: OptStr = None
    space_id: OptStr = None
    dir: OptStr = None


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
    trackio: TrackioConfig = field(default_factory=TrackioConfig)
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
