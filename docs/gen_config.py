"""docs/config.md: every key of the typed config schema, with type, default, range, meaning.

The sections are :mod:`telemetry.config`, :mod:`telemetry.metrics.evaluator` and
:mod:`collector.config`; type, default and range are read from the pydantic fields, a
meaning from the class docstring's ``Attributes:`` section, else from :data:`FIELD_DOCS`,
and a field with neither fails the generator. ``python -m docs.gen`` loads this file by path.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any

from pydantic import SecretStr

FIELD_DOCS: dict[str, str] = {
    "LimitsConfig.max_attributes_per_point": (
        "attributes of one point at most (as Prometheus's `label_limit`); points over it "
        "are rejected and counted"
    ),
    "LimitsConfig.max_attribute_key_length": (
        "characters of an attribute key at most (as `label_name_length_limit`)"
    ),
    "LimitsConfig.max_attribute_value_length": (
        "characters of an attribute value at most, arrays and maps by their text (as "
        "`label_value_length_limit`)"
    ),
    "LimitsConfig.max_metric_name_length": "characters of a metric name at most",
    # StatsLoggerConfig
    "StatsLoggerConfig.experiment_name": (
        "names the run (W&B project default, resource attribute, directories); no `/`"
    ),
    "StatsLoggerConfig.trial_name": "names the trial within the experiment; no `/`",
    "StatsLoggerConfig.fileroot": "root of local files: `<fileroot>/<experiment>/<trial>/`",
    "StatsLoggerConfig.wandb": "the W&B bridge",
    "StatsLoggerConfig.swanlab": "the SwanLab bridge",
    "StatsLoggerConfig.trackio": "the Trackio bridge",
    "StatsLoggerConfig.tensorboard": "the TensorBoard bridge",
    "StatsLoggerConfig.prometheus": "the in-process Prometheus endpoint",
    "StatsLoggerConfig.console": "the per-step console table",
    "StatsLoggerConfig.otlp": "send to a collector instead of in-process sinks",
    # WandBConfig
    "WandBConfig.mode": "`disabled` never calls `wandb.init`",
    "WandBConfig.wandb_base_url": "W&B server URL; empty means W&B's default",
    "WandBConfig.wandb_api_key": "secret; never logged or uploaded",
    "WandBConfig.entity": "W&B entity",
    "WandBConfig.project": "W&B project; default the experiment name",
    "WandBConfig.name": "run name; default the trial name",
    "WandBConfig.job_type": "W&B job type",
    "WandBConfig.group": "W&B group; default `<experiment>_<trial>`",
    "WandBConfig.notes": "W&B notes",
    "WandBConfig.tags": "W&B tags",
    "WandBConfig.config": "extra config logged with the run",
    "WandBConfig.id_suffix": "run id is `<experiment>_<trial>_<id_suffix>`; `timestamp` expands",
    # SwanlabConfig
    "SwanlabConfig.project": "SwanLab project; default the experiment name",
    "SwanlabConfig.name": "run name; default the trial name",
    "SwanlabConfig.config": "extra config logged with the run",
    "SwanlabConfig.logdir": "default `<fileroot>/<experiment>/<trial>/swanlog`",
    "SwanlabConfig.mode": "`local` needs `swanlab[dashboard]`; `cloud` = `online`",
    "SwanlabConfig.api_key": "secret; never logged or uploaded",
    # TensorBoardConfig
    "TensorBoardConfig.path": "event file directory; `null` disables the sink",
    # PrometheusConfig
    "PrometheusConfig.enabled": "serve `/metrics` and `/healthz`",
    "PrometheusConfig.host": "bind address",
    "PrometheusConfig.port": "port; 0 picks a free one",
    "PrometheusConfig.series_limit": (
        "series per metric; more go to one `otel_metric_overflow` series"
    ),
    "PrometheusConfig.expire_seconds": "series not updated this long disappear",
    # ConsoleConfig
    "ConsoleConfig.enabled": "print a per-step table (rank 0)",
    "ConsoleConfig.width": "table width; default the terminal's",
    # OtlpConfig
    "OtlpConfig.endpoint": "`host:port` of a collector; unset means the embedded default",
    "OtlpConfig.insecure": "plaintext gRPC (no TLS)",
    "OtlpConfig.tls": "client TLS; needs `endpoint`",
    "OtlpConfig.headers": "gRPC metadata such as `authorization`; secret; needs `endpoint`",
    "OtlpConfig.timeout": "seconds per export call",
    "OtlpConfig.queue_size": "snapshots queued in memory; past half full they spill to the spool",
    "OtlpConfig.spool_dir": "default `<fileroot>/<experiment>/<trial>/otlp-spool/`",
    "OtlpConfig.spool_limit_bytes": "on-disk spool bound; beyond it points are dropped and counted",
    "OtlpConfig.max_points_per_request": "points per OTLP request (well under gRPC's 4 MiB)",
    # OtlpTlsConfig
    "OtlpTlsConfig.ca_file": "PEM CA bundle to trust",
    "OtlpTlsConfig.cert_file": "client certificate (PEM); with `key_file`",
    "OtlpTlsConfig.key_file": "client key (PEM); with `cert_file`",
    # EvaluatorConfig
    "EvaluatorConfig.freq_epochs": "evaluate every N epochs",
    "EvaluatorConfig.freq_steps": "evaluate every N steps",
    "EvaluatorConfig.freq_secs": "evaluate every N seconds",
    "EvaluatorConfig.eval_before_train": "evaluate at the first `evaluate()` (as AReaL), or "
    "before step 0 with `before_train()`",
    # CollectorConfig
    "CollectorConfig.receiver": "the OTLP/gRPC endpoint",
    "CollectorConfig.auth": "bearer-token check",
    "CollectorConfig.limits": "bounds on memory, series and concurrency",
    "CollectorConfig.sinks": "the StatsLogger's sink sections, with the collector's defaults",
    "CollectorConfig.durable": "what was accepted is on disk per sink until the sink holds it",
    "CollectorConfig.scrape": "Prometheus endpoints (vLLM, SGLang) scraped into their runs",
    "CollectorConfig.traces": "spans: the merged timeline per run, duration histograms, forwarding",
    "LimitsConfig.max_series_per_metric": (
        "stateful series per metric the decoder keeps (cumulative histograms, delta sums)"
    ),
    "LimitsConfig.max_runs": (
        "experiment/trial runs with their own sinks; snapshots of further runs are refused "
        "and counted"
    ),
    "LimitsConfig.memory_limit_bytes": "bytes of accepted requests still in sink queues",
    "LimitsConfig.queue_size": "snapshots queued per sink",
    "LimitsConfig.max_concurrent_requests": "requests in flight; more get RESOURCE_EXHAUSTED",
    "LimitsConfig.sink_timeout_s": "seconds per sink export before it is marked degraded",
    "LimitsConfig.drain_timeout_s": "seconds to drain the queues on SIGTERM",
    "SinksConfig.fileroot": "as `stats_logger.fileroot`",
    "SinksConfig.wandb": "as `stats_logger.wandb`",
    "SinksConfig.swanlab": "as `stats_logger.swanlab`",
    "SinksConfig.trackio": (
        "as `stats_logger.trackio`; each run writes its run directory's `trackio/` (a set "
        "`dir` is a root: `<dir>/<experiment>/<trial>` links there)"
    ),
    "SinksConfig.tensorboard": "as `stats_logger.tensorboard`; set, each run writes to its run "
    "directory's `tensorboard/` ([Run files](architecture.md#run-files))",
    "SinksConfig.prometheus": "as `stats_logger.prometheus`, on by default",
    "SinksConfig.console": "as `stats_logger.console`, off by default",
    "SinksConfig.remote_write": "Prometheus remote write of the collector's series",
    "RemoteWriteConfig.enabled": "write the series to `url`",
}
"""Per ``Class.field``: its meaning (subclasses fall back to their base class's entry)."""


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _type_name(tp: Any) -> str:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        text = " \\| ".join(names)
        return text + " \\| null" if type(None) in args else text
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if tp is SecretStr:
        return "secret string"
    if tp is Any:
        return "any"
    if dataclasses.is_dataclass(tp):
        return "section"
    return {str: "string", int: "int", float: "float", bool: "bool"}.get(tp, tp.__name__)


def _range(info: Any) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥"}
    out = []
    for meta in info.metadata:
        for attr, sign in signs.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None and dataclasses.is_dataclass(info.default_factory):
        return "–"
    value = info.default if info.default_factory is None else info.default_factory()
    if value == {}:
        return "`{}`"
    if isinstance(value, SecretStr):
        return '`""`' if not value.get_secret_value() else "`<set>`"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, int) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"`{value}` ({value // (1024 * 1024)} MiB)"
    return f"`{value}`"


def _attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a class docstring (Google style): name -> text."""
    lines = (cls.__dict__.get("__doc__") or "").splitlines()
    out: dict[str, str] = {}
    names: list[str] = []
    inside, indent = False, 0
    for line in lines:
        stripped = line.strip()
        if stripped == "Attributes:":
            inside, indent = True, len(line) - len(line.lstrip())
            continue
        if not inside:
            continue
        depth = len(line) - len(line.lstrip())
        if stripped and depth <= indent:
            break
        match = re.match(r"([\w, ]+):\s*(.*)", stripped)
        if match and depth == indent + 4:
            names = [n.strip() for n in match.group(1).split(",")]
            for n in names:
                out[n] = match.group(2)
        elif stripped:
            for n in names:
                out[n] += " " + stripped
    return {k: " ".join(v.replace("``", "`").split()).rstrip(".") for k, v in out.items()}


def _doc(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        text = _attribute_docs(klass).get(name) or FIELD_DOCS.get(f"{klass.__name__}.{name}")
        if text:
            return text
    raise SystemExit(
        f"docs/gen_config.py: no meaning for {cls.__name__}.{name} (add an Attributes: entry to "
        "its docstring or one to FIELD_DOCS)"
    )


def _section(cls: type, path: str, lines: list[str]) -> None:
    doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split()).replace("``", "`")
    lines += [
        f"### `{path}`",
        "",
        doc,
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    nested = []
    for name, info in cls.__pydantic_fields__.items():
        tp = _strip(info.annotation)
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] or [tp]
        kind = _type_name(info.annotation)
        limit = _range(info)
        meaning = _doc(cls, name) + (f" ({limit})" if limit else "")
        lines.append(f"| `{name}` | {kind} | {_default(info)} | {meaning} |")
        if dataclasses.is_dataclass(inner[0]):
            nested.append((inner[0], f"{path}.{name}"))
    lines.append("")
    for child, child_path in nested:
        _section(child, child_path, lines)


def render_config() -> str:
    from collector.config import CollectorConfig
    from telemetry.config import StatsLoggerConfig
    from telemetry.metrics.evaluator import EvaluatorConfig

    lines = [
        "<!-- Generated by `python -m docs.gen` from telemetry/config/,",
        "     telemetry/metrics/evaluator.py and collector/config.py; do not edit. -->",
        "# Configuration",
        "",
        "Every key of rltel's typed config schema, read from the pydantic dataclasses that",
        'validate it. Types are strict (`enabled: "no"` or `port: true` fail), unknown keys fail,',
        "and every error names the full key. A `section` row has its own table below; `null`",
        "is YAML's null (Python `None`). See [areal-migration.md](areal-migration.md) for the",
        "forms a config may take (mapping, YAML path, OmegaConf, AReaL dataclass).",
        "",
        "## StatsLogger: `stats_logger`",
        "",
        "AReaL's `stats_logger` section plus rltel's `prometheus`, `console` and `otlp`; pass it",
        "(or the whole experiment config) to `StatsLogger(config)`.",
        "",
    ]
    _section(StatsLoggerConfig, "stats_logger", lines)
    lines += [
        "## Evaluator: `evaluator`",
        "",
        "AReaL's `evaluator` fields; pass the section (or the whole experiment config) to",
        "`telemetry.metrics.evaluator.Evaluator(config, steps_per_epoch)`.",
        "",
    ]
    _section(EvaluatorConfig, "evaluator", lines)
    lines += [
        "## Collector: `collector`",
        "",
        "The YAML file of `rltel collector --config FILE` (see",
        "`collector/collector.example.yaml`); `rltel collector --print-config` prints the",
        "effective values with secrets shown as `<set>`. The file holds the `collector:`",
        "section (or that section's keys alone). For the built-in defaults run `rltel",
        "collector` without `--config`: a file that sets nothing (empty, only comments, or",
        "`collector:` with no key under it) is refused with one line (exit 2), as it is most",
        "likely the wrong file.",
        "",
    ]
    _section(CollectorConfig, "collector", lines)
    return "\n".join(lines).rstrip("\n") + "\n"
