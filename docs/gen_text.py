"""The hand-written text of the generated pages: each metric's definition and healthy
range (docs/metrics.md), and the meaning of config fields without an ``Attributes:``
docstring (docs/config.md). ``docs.gen`` fails when an entry it needs is missing."""

from __future__ import annotations

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
    "rltel/otlp/points_exported": ("points the sender's transport delivered", "grows"),
    "rltel/otlp/points_failed": ("points whose export failed permanently", "0"),
    "rltel/otlp/points_spooled": (
        "points written to the on-disk spool",
        "0 when the collector is up",
    ),
    "rltel/otlp/points_dropped": ("points dropped (queue full, spool limit)", "0 (alert)"),
    "rltel/otlp/queue_depth": ("requests waiting in the sender's queue", "near 0"),
    "rltel/otlp/spool_bytes": ("bytes in the sender's spool", "0 when the collector is up"),
    "rltel/otlp/export_latency": ("seconds per OTLP export call", "well under `otlp.timeout`"),
}
"""Per catalogue metric: definition (from the source documents) and healthy range."""


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
    "OtlpConfig.queue_size": "requests queued in memory before spilling to the spool",
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
