"""Generate docs/metrics.md and docs/config.md from the code they describe.

``python -m docs.gen`` writes both pages; ``python -m docs.gen --check`` exits 1 when a
committed page differs from what the code generates (``tests/docs`` runs the check).

- metrics.md: every metric of :mod:`dashboards.catalog` (the list the dashboards and alert
  rules read), its Prometheus names from the sink's own naming functions, the panels whose
  queries read it (from :mod:`dashboards.build`) and the alert rules that do (from
  :mod:`dashboards.alerts`); definitions and healthy ranges are written below, one per
  catalogue entry, and a catalogue entry without one fails the generator.
- config.md: every key of the typed config schema (:mod:`telemetry.config`,
  :mod:`telemetry.evaluator`, :mod:`collector.config`), with its type, default and range read
  from the pydantic fields; a meaning comes from the class docstring's ``Attributes:``
  section, else from ``FIELD_DOCS`` below, and a field with neither fails the generator.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr

DOCS = Path(__file__).resolve().parent
METRICS_PATH = DOCS / "metrics.md"
CONFIG_PATH = DOCS / "config.md"

# ---------------------------------------------------------------------------- metrics.md

KL_RANGE = "0 ≤ value < {warn} (alert at {warn}, critical at {crit})"

DEFINITIONS: dict[str, tuple[str, str]] = {
    # metric -> (definition, healthy range); d = log p_trainer - log p_rollout per token.
    "ppo_actor/train_infer/kl_k1": (
        "mean of −d over finite valid tokens (d = log p_trainer − log p_rollout)",
        "near 0; may be negative",
    ),
    "ppo_actor/train_infer/kl_k2": ("mean of d²/2 over finite valid tokens", "near 0, ≥ 0"),
    "ppo_actor/train_infer/kl_k3": (
        "mean of expm1(d) − d over finite valid tokens (Schulman's k3, float64 `expm1`)",
        KL_RANGE,
    ),
    "ppo_actor/train_infer/logp_diff": (
        "d over finite valid tokens; buckets at 0, ±log{1.5,2,3,5,10}",
        "avg near 0; min/max within ±log 2",
    ),
    "ppo_actor/train_infer/logp_abs_diff": ("\\|d\\| over finite valid tokens", "avg ≪ 0.1"),
    "ppo_actor/train_infer/nonfinite_logp_fraction": (
        "fraction of valid tokens where either log-prob is NaN or ±inf",
        "0 (alert above 0)",
    ),
    "ppo_actor/train_infer/kl_k3_overflow_fraction": (
        "fraction of finite valid tokens where expm1(d) overflows to +inf",
        "0",
    ),
    **{
        f"ppo_actor/train_infer/ratio_outside_{t}": (
            f"fraction of valid tokens with \\|d\\| > log {t} (probability ratio outside "
            f"[1/{t}, {t}]); NaN when any valid token is non-finite",
            "near 0; larger t closer to 0",
        )
        for t in ("1.5", "2", "3", "5", "10")
    },
    "ppo_actor/update/version_stats/sample_staleness_theta_avg": (
        "token-weighted mean of current − behaviour policy version over valid generated tokens",
        "< {stale} versions (alert at {stale} for 15m)",
    ),
    "ppo_actor/update/version_stats/sample_staleness_theta_min": (
        "smallest current − behaviour version over valid generated tokens",
        "≥ 0",
    ),
    "ppo_actor/update/version_stats/sample_staleness_theta_max": (
        "largest current − behaviour version over valid generated tokens",
        "within the configured max staleness",
    ),
    "ppo_actor/update/version_stats/sample_staleness_proximal_avg": (
        "token-weighted mean of proximal − behaviour version (decoupled PPO)",
        "small, ≥ 0",
    ),
    "ppo_actor/update/version_stats/stale_token_fraction": (
        "fraction of valid generated tokens with behaviour version < current version",
        "depends on the off-policyness allowed; 0 when fully on-policy",
    ),
    "ppo_actor/update/version_stats/future_token_fraction": (
        "fraction of valid generated tokens with behaviour version > current version",
        "0 (alert above 0)",
    ),
    **{
        f"ppo_actor/advantage_{sign}_fraction": (
            f"fraction of loss-mask tokens whose advantage is {word}, before filtering",
            "positive and negative both well above 0" if sign != "zero" else "well below 1",
        )
        for sign, word in (("positive", "> 0"), ("negative", "< 0"), ("zero", "exactly 0"))
    },
    "ppo_actor/update/loss": ("the policy loss over the loss mask", "finite"),
    "ppo_actor/update/grad_norm": (
        "gradient norm of the update (a scalar stream, count-weighted mean)",
        "finite; below {spike}× its median over the last hour",
    ),
    "rollout/reward": (
        "rollout reward, merged count-weighted over rollout workers",
        "not below its recent level by {reward_drop} of it",
    ),
    "rltel/step": ("the trainer's `global_step` of the export (rltel's own)", "increases"),
    "rltel/closed": ("1 once the trainer called `StatsLogger.close()` (rltel's own)", "–"),
    "train_perf/tokens_per_second": ("window tokens / window seconds", "steady"),
    "train_perf/cumulative_tokens_per_second": ("total tokens / total seconds", "steady"),
    "train_perf/estimated_flops_per_second": ("window estimated FLOPs / window seconds", "steady"),
    "train_perf/cumulative_estimated_flops_per_second": (
        "total estimated FLOPs / total seconds",
        "steady",
    ),
    "train_perf/seconds": (
        "seconds inside `TrainPerf.measure` this window, max over ranks",
        "steady",
    ),
    "train_perf/tokens": (
        "valid tokens (prompt + response) trained this window, summed over the DP group",
        "steady",
    ),
    "train_perf/total_tokens": (
        "valid tokens since the `TrainPerf` was created",
        "rate not below {drop} of its level (alert)",
    ),
    "train_perf/total_seconds": ("training seconds since the `TrainPerf` was created", "grows"),
    "train_perf/mfu": (
        "window FLOPs / (seconds × peak FLOP/s per device × devices)",
        "hardware and model dependent; 0.3-0.6 is typical for large dense training",
    ),
    "train_perf/cumulative_mfu": ("total FLOPs / (total seconds × peak × devices)", "as `mfu`"),
    "train_perf/total_estimated_flops": ("estimated training FLOPs since creation", "grows"),
    "timeperf/train_step": (
        "wall seconds of a `record_timing(name)` scope (here `train_step`); one series per name",
        "steady",
    ),
    "train_perf/seconds/rank_min": ("the fastest rank's `train_perf/seconds`", "close to max"),
    "train_perf/seconds/rank_max": ("the slowest rank's `train_perf/seconds`", "close to min"),
    "train_perf/seconds/slowest_rank": ("the rank holding `rank_max`", "not always the same"),
    "timeperf/train_step/slowest_rank": (
        "the rank with the largest mean of a timing (here `train_step`)",
        "not always the same",
    ),
    "moe_balance/max_over_ideal": (
        "max(c) / (Σc / E) over a layer's expert counts c; 0 for a layer with no assignments",
        "< {moe_warn} (alert at {moe_warn}, critical at {moe_crit})",
    ),
    "moe_balance/load_percent": (
        "100 · c_e / Σc: an expert's share of the layer's tokens",
        "near 100 / E",
    ),
    "moe_balance/tokens": ("c_e: token assignments routed to an expert (top-k repeats count)", "–"),
    "rltel/otlp/points_exported": ("points the sender's OTLP sink delivered", "grows"),
    "rltel/otlp/points_failed": ("points whose export failed permanently", "0"),
    "rltel/otlp/points_spooled": (
        "points written to the on-disk spool",
        "0 when the collector is up",
    ),
    "rltel/otlp/points_dropped": ("points dropped (queue full, spool limit)", "0 (alert)"),
    "rltel/otlp/queue_depth": ("snapshots waiting in the OTLP sink's queue", "near 0"),
    "rltel/otlp/spool_bytes": ("bytes in the sender's spool", "0 when the collector is up"),
    "rltel/otlp/export_latency": ("seconds per OTLP export call", "well under `otlp.timeout`"),
}
"""Per catalogue metric: definition (from the source documents) and healthy range."""


def _range_values() -> dict[str, str]:
    from dashboards import alerts as a

    return {
        "warn": f"{a.KL_K3_WARNING:g}",
        "crit": f"{a.KL_K3_CRITICAL:g}",
        "stale": f"{a.STALENESS_WARNING:g}",
        "spike": f"{a.GRAD_NORM_SPIKE_FACTOR:g}",
        "reward_drop": f"{a.REWARD_DROP_FRACTION:.0%}",
        "drop": f"{a.THROUGHPUT_DROP_RATIO:.0%}",
        "moe_warn": f"{a.MAX_OVER_IDEAL_WARNING:g}",
        "moe_crit": f"{a.MAX_OVER_IDEAL_CRITICAL:g}",
    }


def _areal_key(m: Any) -> str:
    from telemetry.model.snapshot import StatReduce

    attributes = dict(m.attributes)
    key = m.metric
    if attributes:
        head, _, leaf = key.rpartition("/")
        parts = [f"{name}_<{name[0]}>" for name in ("layer", "expert") if name in attributes]
        key = "/".join([head, *parts, leaf])
    if m.kind == "histogram" and m.reduce == StatReduce.AVG_MIN_MAX:
        return f"`{key}/{{avg,min,max}}`"
    return f"`{key}`"


def _series(m: Any) -> list[str]:
    if m.kind != "histogram":
        return [m.name]
    return [m.stat(s) for s in ("avg", "min", "max", "bucket", "count", "sum")]


def _uses(m: Any, exprs: list[tuple[str, str]]) -> list[str]:
    """Labels of the queries (label, expr) that read ``m``, by name or by a name pattern."""
    series = _series(m)
    found = []
    for label, expr in exprs:
        by_name = any(re.search(rf"(?<![\w:]){re.escape(s)}(?![\w:])", expr) for s in series)
        patterns = re.findall(r'__name__=~"([^"]+)"', expr)
        negated = re.findall(r'__name__!~"([^"]+)"', expr)
        by_pattern = any(re.fullmatch(p, s) for p in patterns for s in series) and not any(
            re.fullmatch(p, s) for p in negated for s in series
        )
        if (by_name or by_pattern) and label not in found:
            found.append(label)
    return found


def _panel_queries() -> list[tuple[str, str]]:
    from dashboards import build

    out = []
    for board in build.BOARDS.values():
        dashboard = board()
        title = dashboard["title"].removeprefix("rltel / ")
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                out.append((f"{title}: {panel['title']}", target.get("expr", "")))
    return out


def _alert_rules() -> list[dict]:
    from dashboards import alerts

    return [rule for group in alerts.alert_rules()["groups"] for rule in group["rules"]]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_metrics() -> str:
    from dashboards import catalog

    missing = [m.metric for m in catalog.ALL if m.metric not in DEFINITIONS]
    if missing:
        raise SystemExit(f"docs/gen.py: no definition for catalogue metrics {missing}")
    values = _range_values()
    panels = _panel_queries()
    rules = _alert_rules()
    alert_exprs = [(r["alert"], r["expr"]) for r in rules]
    lines = [
        "<!-- Generated by `python -m docs.gen` from dashboards/catalog.py, dashboards/boards.py",
        "     and dashboards/alerts.py; do not edit. -->",
        "# Metrics",
        "",
        "Every metric the dashboards and alert rules read, as the producers emit it. The",
        "Prometheus names come from the sink's own naming functions ([OTel mapping and",
        "Prometheus names](otel-mapping.md)); histograms have `_avg`/`_min`/`_max` gauges (the",
        "last step) and cumulative `_bucket`/`_count`/`_sum`. Definitions follow the source",
        "documents (AReaL's metric and evaluation guides, Twinkle's metric list); see",
        "[producers.md](producers.md) for the functions that record them. A `timeperf/<name>`",
        "key stands for every timing; `<l>` and `<e>` are a layer and an expert.",
        "",
        "| AReaL key | Prometheus | type (unit) | definition | healthy range | panels | alerts |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in catalog.ALL:
        definition, healthy = DEFINITIONS[m.metric]
        names = _series(m)
        prom = f"`{names[0]}`" if len(names) == 1 else f"`{m.name}` + `_avg`, `_min`, `_max`, …"
        unit = f" (`{m.unit}`)" if m.unit else ""
        labels = dict(m.attributes)
        if labels:
            prom += " {" + ",".join(labels) + "}"
        used = "; ".join(_uses(m, panels)) or "–"
        fired = ", ".join(_uses(m, alert_exprs)) or "–"
        row = [
            _areal_key(m),
            prom,
            f"{m.kind}{unit}",
            definition,
            healthy.format(**values),
            _cell(used),
            fired,
        ]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## Alert rules",
        "",
        "Generated from `dashboards/alerts.py` (`python -m dashboards.build` writes",
        '`dashboards/prometheus/alerts.yml` from the same code). "For" is the hold-down: the',
        "condition must hold that long before the alert fires. Thresholds are starting points:",
        "tune them in `dashboards/alerts.py`, regenerate, and move the pins in",
        "`dashboards/prometheus/alerts_test.yml`.",
        "",
        "| Alert | Fires when | For | Severity | Summary |",
        "|---|---|---|---|---|",
    ]
    for rule in rules:
        summary = re.sub(r"\s*\(\{\{ \$labels\.experiment \}\}/\{\{ \$labels\.trial \}\}\)", "",
                         rule["annotations"]["summary"])  # fmt: skip
        row = [
            rule["alert"],
            f"`{_cell(rule['expr'])}`",
            rule["for"],
            rule["labels"]["severity"],
            _cell(summary),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- config.md

FIELD_DOCS: dict[str, str] = {
    "LimitsConfig.max_points_per_request": (
        "data points in one request at most; more is refused with INVALID_ARGUMENT (split"
        " the request: retrying cannot help)"
    ),
    "LimitsConfig.max_decoded_bytes": (
        "estimated decoded size of one request at most (INVALID_ARGUMENT)"
    ),
    "LimitsConfig.heavy_request_bytes": (
        "a request larger than this on the wire is heavy: heavy requests run at most "
        "`max_heavy_requests` at a time, so small exports keep their latency"
    ),
    "LimitsConfig.heavy_request_points": "a request with more points than this is heavy too",
    "LimitsConfig.max_heavy_requests": (
        "heavy requests parsed or decoded at once; one more is refused with "
        "RESOURCE_EXHAUSTED and a retry delay"
    ),
    "LimitsConfig.retry_after_s": (
        "the retry delay suggested to refused senders (`grpc-retry-pushback-ms`)"
    ),
    "LimitsConfig.deadline_margin_s": (
        "a request with less time than this left before its deadline is not ingested"
    ),
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
    "EvaluatorConfig.eval_before_train": "`before_train()` runs an evaluation",
    # CollectorConfig
    "CollectorConfig.receiver": "the OTLP/gRPC endpoint",
    "CollectorConfig.auth": "bearer-token check",
    "CollectorConfig.limits": "bounds on memory, series and concurrency",
    "CollectorConfig.sinks": "the StatsLogger's sink sections, with the collector's defaults",
    "ReceiverConfig.host": "bind address; beyond loopback is an explicit choice",
    "ReceiverConfig.port": "OTLP/gRPC port",
    "ReceiverConfig.max_message_bytes": "largest request accepted",
    "ReceiverConfig.max_workers": "gRPC server threads",
    "ReceiverConfig.tls": "server TLS",
    "TlsConfig.cert_file": "server certificate (PEM file must exist); with `key_file`",
    "TlsConfig.key_file": "server key (PEM file must exist); with `cert_file`",
    "AuthConfig.bearer_token": "expected token, inline; secret",
    "AuthConfig.token_file": "file holding the token (preferred); not with `bearer_token`",
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
    "SinksConfig.tensorboard": "as `stats_logger.tensorboard`",
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
        f"docs/gen.py: no meaning for {cls.__name__}.{name} (add an Attributes: entry to "
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
    from telemetry.evaluator import EvaluatorConfig

    lines = [
        "<!-- Generated by `python -m docs.gen` from telemetry/config.py, telemetry/evaluator.py",
        "     and collector/config.py; do not edit. -->",
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
        "`telemetry.evaluator.Evaluator(config, steps_per_epoch)`.",
        "",
    ]
    _section(EvaluatorConfig, "evaluator", lines)
    lines += [
        "## Collector: `collector`",
        "",
        "The YAML file of `rltel collector --config FILE` (see",
        "`collector/collector.example.yaml`); `rltel collector --print-config` prints the",
        "effective values with secrets shown as `<set>`.",
        "",
    ]
    _section(CollectorConfig, "collector", lines)
    return "\n".join(lines).rstrip("\n") + "\n"


PAGES = {METRICS_PATH: render_metrics, CONFIG_PATH: render_config}


def main(argv: list[str] | None = None) -> int:
    """Write the generated pages, or with ``--check`` report the ones that differ."""
    parser = argparse.ArgumentParser(prog="python -m docs.gen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    from dashboards.build import sync_files

    pages = {path: render() for path, render in PAGES.items()}
    return sync_files(pages, args.check, "python -m docs.gen")


if __name__ == "__main__":
    sys.exit(main())
