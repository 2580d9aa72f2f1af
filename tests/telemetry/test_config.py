"""The typed config schema: exact errors, every AReaL form, interpolation, secrets."""

# ruff: noqa: E501 (the table keeps each exact message on one line)

from __future__ import annotations

import dataclasses
import logging
import re

import pytest
from omegaconf import OmegaConf

from collector.config import SinksConfig, from_dict
from telemetry.config import PrometheusConfig, StatsLoggerConfig, load_config, load_experiment
from telemetry.config import TrackioConfig as TrackioSection
from telemetry.model.errors import ConfigError

WANDB_KEYS = (
    "config, entity, group, id_suffix, job_type, mode, name, notes, project, tags, "
    "wandb_api_key, wandb_base_url"
)
BAD = [
    # wrong type
    ({"prometheus": {"enabled": "no"}}, "stats_logger.prometheus.enabled must be a valid boolean, got 'no'"),
    ({"tensorboard": {"path": 5}}, "stats_logger.tensorboard.path must be a valid string, got 5"),
    ({"fileroot": 123}, "stats_logger.fileroot must be a valid string, got 123"),
    ({"otlp": {"timeout": "ten"}}, "stats_logger.otlp.timeout must be a valid number, got 'ten'"),
    ({"prometheus": {"port": True}}, "stats_logger.prometheus.port must be a valid integer, got True"),
    ({"prometheus": 5}, "stats_logger.prometheus must be a mapping, got int 5"),
    ({"wandb": {"wandb_api_key": 5}}, "stats_logger.wandb.wandb_api_key must be a valid string, got <hidden>"),
    ({"wandb": {"mode": "sometimes"}}, "stats_logger.wandb.mode must be 'online', 'offline', 'disabled' or 'shared', got 'sometimes'"),
    # out of range
    ({"console": {"width": -3}}, "stats_logger.console.width must be greater than or equal to 24, got -3"),
    ({"otlp": {"max_points_per_request": 2}}, "stats_logger.otlp.max_points_per_request must be greater than or equal to 4, got 2"),
    ({"prometheus": {"port": 70000}}, "stats_logger.prometheus.port must be less than or equal to 65535, got 70000"),
    ({"otlp": {"timeout": 0}}, "stats_logger.otlp.timeout must be greater than 0, got 0"),
    # unknown key
    ({"wandb": {"mdoe": "offline"}}, f"unknown key stats_logger.wandb.mdoe (known: {WANDB_KEYS})"),
    # unresolved interpolation, missing value
    ({"fileroot": "${cluster.fileroot}/logs"}, "stats_logger.fileroot: cannot resolve interpolation ${cluster.fileroot}/logs (Interpolation key 'cluster.fileroot' not found)"),
    ({"trial_name": "???"}, "stats_logger.trial_name: no value given (???)"),
    # cross-field rules
    ({"otlp": {"headers": {"authorization": "Bearer x"}}}, "stats_logger.otlp.headers is set but otlp.endpoint is not (nothing to send to)"),
    ({"otlp": {"endpoint": "h:1", "tls": {"cert_file": "c.pem"}}}, "stats_logger.otlp.tls.key_file is required: cert_file and key_file go together"),
    ({"experiment_name": "a/b"}, "stats_logger.experiment_name must not contain '/' (it names a directory)"),
]  # fmt: skip


@pytest.mark.parametrize(("section", "message"), BAD)
def test_bad_config_exact_message(section, message):
    with pytest.raises(ConfigError) as info:
        load_config(section)
    assert str(info.value) == message


def test_every_error_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        load_config({"fileroot": 1, "console": {"enabled": "yes"}})
    assert str(info.value) == (
        "stats_logger.fileroot must be a valid string, got 1; "
        "stats_logger.console.enabled must be a valid boolean, got 'yes'"
    )


# A miniature of AReaL 1.0.4's config classes (areal/api/cli_args.py), with its field names.
@dataclasses.dataclass
class WandBConfig:
    mode: str = "disabled"
    wandb_base_url: str = ""
    wandb_api_key: str = ""
    entity: str | None = None
    project: str | None = None
    name: str | None = None
    job_type: str | None = None
    group: str | None = None
    notes: str | None = None
    tags: list[str] | None = None
    config: dict | None = None
    id_suffix: str | None = "train"


@dataclasses.dataclass
class SwanlabConfig:
    project: str | None = None
    name: str | None = None
    config: dict | None = None
    logdir: str | None = None
    mode: str | None = "disabled"
    api_key: str | None = None


@dataclasses.dataclass
class TensorBoardConfig:
    path: str | None = None


@dataclasses.dataclass
class TrackioConfig:
    mode: str = "disabled"
    project: str | None = None
    name: str | None = None
    space_id: str | None = None


@dataclasses.dataclass
class ArealStatsLoggerConfig:
    experiment_name: str = "gsm8k-grpo"
    trial_name: str = "trial0"
    fileroot: str = "/tmp/areal"
    wandb: WandBConfig = dataclasses.field(default_factory=WandBConfig)
    swanlab: SwanlabConfig = dataclasses.field(default_factory=SwanlabConfig)
    tensorboard: TensorBoardConfig = dataclasses.field(default_factory=TensorBoardConfig)
    trackio: TrackioConfig = dataclasses.field(
        default_factory=lambda: TrackioConfig(mode="local", project="tp")
    )


@dataclasses.dataclass
class EvaluatorSection:
    experiment_name: str = "gsm8k-grpo"
    trial_name: str = "trial0"
    fileroot: str = "/tmp/areal"
    freq_epochs: int | None = None
    freq_steps: int | None = 2
    freq_secs: int | None = None


@dataclasses.dataclass
class ExperimentConfig:
    experiment_name: str = "gsm8k-grpo"
    trial_name: str = "trial0"
    seed: int = 1
    evaluator: EvaluatorSection = dataclasses.field(default_factory=EvaluatorSection)
    stats_logger: ArealStatsLoggerConfig = dataclasses.field(
        default_factory=lambda: ArealStatsLoggerConfig(
            wandb=WandBConfig(mode="shared", wandb_api_key="k-123", tags=["a"])
        )
    )


def ignored_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "AReaL keys" in r.getMessage()]


@pytest.mark.parametrize(
    "form",
    ["instance", "asdict", "section", "dictconfig", "whole_dictconfig", "section_node"],
)
def test_every_areal_form_is_accepted(form, caplog):
    experiment = ExperimentConfig()
    source = {
        "instance": experiment,
        "asdict": dataclasses.asdict(experiment),
        "section": experiment.stats_logger,
        "dictconfig": OmegaConf.structured(experiment.stats_logger),
        "whole_dictconfig": OmegaConf.structured(experiment),
        "section_node": OmegaConf.structured(experiment).stats_logger,
    }[form]
    with caplog.at_level(logging.WARNING):
        config, logged = load_experiment(source)
    assert (config.experiment_name, config.trial_name) == ("gsm8k-grpo", "trial0")
    assert config.wandb.mode == "shared" and config.wandb.tags == ("a",)
    assert config.wandb.wandb_api_key.get_secret_value() == "k-123"
    assert ignored_warnings(caplog) == []  # stats_logger.trackio is taken: the Trackio sink
    assert config.trackio == TrackioSection(mode="local", project="tp", name=None, space_id=None)
    assert "k-123" not in repr(config) and "k-123" not in repr(logged)
    if form in ("instance", "asdict", "whole_dictconfig"):
        assert logged["seed"] == 1 and logged["evaluator"]["freq_steps"] == 2
    assert "wandb_api_key" not in logged.get("stats_logger", logged)["wandb"]


AREAL_YAML = """
experiment_name: gsm8k-grpo
trial_name: trial0
cluster:
  fileroot: {root}
stats_logger:
  experiment_name: ${{experiment_name}}
  trial_name: ${{trial_name}}
  fileroot: ${{cluster.fileroot}}
  wandb:
    mode: disabled
  tensorboard:
    path: ${{cluster.fileroot}}/tb/${{experiment_name}}
"""


def test_yaml_path_with_interpolations_resolves_like_areal(tmp_path):
    path = tmp_path / "gsm8k_grpo.yaml"
    path.write_text(AREAL_YAML.format(root=tmp_path))
    config = load_config(path)
    assert config.fileroot == str(tmp_path)
    assert config.tensorboard.path == f"{tmp_path}/tb/gsm8k-grpo"
    assert "${" not in repr(config)


def test_a_section_that_refers_to_its_parent_names_the_reference():
    with pytest.raises(ConfigError, match=re.escape("stats_logger.experiment_name: cannot")):
        load_config({"experiment_name": "${experiment_name}"})


def test_the_evaluator_takes_areals_section_with_one_warning(caplog):
    from telemetry.evaluator import Evaluator

    with caplog.at_level(logging.WARNING):
        evaluator = Evaluator(ExperimentConfig(), steps_per_epoch=4)
    assert evaluator.config.freq_steps == 2
    assert ignored_warnings(caplog) == [
        "evaluator: AReaL keys that rltel does not implement are ignored: "
        "evaluator.experiment_name, evaluator.fileroot, evaluator.trial_name"
    ]


def test_collector_reuses_the_sink_sections_with_its_own_defaults():
    sinks = from_dict({"sinks": {"prometheus": {"port": 0}, "console": {"width": 80}}}).sinks
    assert isinstance(sinks.prometheus, PrometheusConfig)
    assert sinks.prometheus.enabled and not sinks.console.enabled
    assert SinksConfig().prometheus.enabled and not StatsLoggerConfig().prometheus.enabled
    with pytest.raises(ConfigError) as info:
        from_dict({"sinks": {"prometheus": {"enabled": "no"}}})
    assert str(info.value) == (
        "collector.sinks.prometheus.enabled must be a valid boolean, got 'no'"
    )


def test_secrets_are_hidden_in_repr_and_dumps():
    config = load_config({"otlp": {"endpoint": "h:1", "headers": {"authorization": "t0k"}}})
    assert "t0k" not in repr(config)
    assert config.otlp.plain_headers() == {"authorization": "t0k"}
    _, logged = load_experiment(config)
    assert "headers" not in logged["otlp"]
