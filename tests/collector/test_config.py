"""Collector config: defaults, YAML loading, validation errors naming the key."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collector.config import CollectorConfig, default_config, from_dict, load, to_yaml
from telemetry.model.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "collector" / "collector.example.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "collector.yaml"
    path.write_text(text)
    return path


def test_defaults_bind_loopback_with_prometheus_on():
    config = default_config()
    assert config.receiver.host == "127.0.0.1"
    assert config.receiver.port == 4317
    assert config.sinks.prometheus.enabled
    assert config.sinks.wandb.mode == "disabled"
    assert config.auth.token() is None


def test_load_yaml_with_sections(tmp_path):
    path = write(
        tmp_path,
        """
receiver: {host: 0.0.0.0, port: 14317, max_message_bytes: 1048576}
limits: {queue_size: 8, memory_limit_bytes: 1000000}
sinks:
  fileroot: /tmp/x
  wandb: {mode: offline, project: p}
  tensorboard: {path: /tmp/tb}
  prometheus: {enabled: true, port: 0}
""",
    )
    config = load(path)
    assert config.receiver.host == "0.0.0.0"
    assert config.receiver.port == 14317
    assert config.limits.queue_size == 8
    assert config.sinks.wandb.mode == "offline"
    run = config.sinks.logger_config("exp", "t1")
    assert (run.experiment_name, run.trial_name, run.fileroot) == ("exp", "t1", "/tmp/x")
    assert run.tensorboard.path == "/tmp/tb"


def test_document_with_collector_key(tmp_path):
    config = load(write(tmp_path, "collector:\n  receiver: {port: 5000}\n"))
    assert config.receiver.port == 5000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("receiver: {prot: 1}", "unknown key collector.receiver.prot"),
        ("bogus: 1", "unknown key collector.bogus"),
        ("sinks: {wandb: {mdoe: offline}}", "unknown key collector.sinks.wandb.mdoe"),
        ("receiver: {port: 70000}", "collector.receiver.port"),
        ("receiver: {port: abc}", "collector.receiver.port"),
        ("receiver: {port: true}", "collector.receiver.port"),
        ("sinks: {prometheus: {port: -1}}", "collector.sinks.prometheus.port"),
        ("limits: {queue_size: 0}", "collector.limits.queue_size"),
        ("limits: {drain_timeout_s: 0}", "collector.limits.drain_timeout_s"),
        ("receiver: {tls: {cert_file: /nonexistent.pem, key_file: /x.key}}", "cert_file"),
        ("auth: {token_file: /nonexistent-token}", "collector.auth.token_file"),
        ("receiver: 5", "collector.receiver must be a mapping"),
        ("sinks: {wandb: {mode: sometimes}}", "collector.sinks.wandb.mode"),
    ],
)
def test_invalid_config_names_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load(write(tmp_path, text))


def test_tls_needs_both_files(tmp_path):
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match=r"collector\.receiver\.tls\.key_file is required"):
        from_dict({"receiver": {"tls": {"cert_file": str(cert)}}})


def test_token_file_and_inline_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert from_dict({"auth": {"token_file": str(token)}}).auth.token() == "s3cret"
    assert from_dict({"auth": {"bearer_token": "abc"}}).auth.token() == "abc"
    with pytest.raises(ConfigError, match="not both"):
        from_dict({"auth": {"token_file": str(token), "bearer_token": "abc"}})


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(write(tmp_path, "receiver: [unclosed"))


def test_print_form_hides_secrets_and_round_trips():
    config = from_dict({"auth": {"bearer_token": "hunter2"}, "receiver": {"port": 4000}})
    text = to_yaml(config)
    assert "hunter2" not in text and "hunter2" not in repr(config)
    document = yaml.safe_load(text)
    assert document["collector"]["auth"] == {"bearer_token": "<set>", "token_file": None}
    del document["collector"]["auth"]
    again = from_dict(document)
    assert again.receiver == config.receiver
    assert again.sinks == config.sinks
    assert again.auth.token() is None
    assert yaml.safe_load(to_yaml(default_config()))["collector"]["auth"]["bearer_token"] is None


def test_example_config_is_valid():
    config = load(EXAMPLE)
    assert isinstance(config, CollectorConfig)
    assert config.receiver.host == "127.0.0.1"


def test_collector_config_imports_no_torch():
    code = (
        "import sys, collector.config, telemetry.otlp.decode, collector.merge;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cli_print_config_and_bad_config(tmp_path, capsys):
    from collector.__main__ import main

    path = write(tmp_path, "receiver: {port: 4400}\nauth: {bearer_token: hunter2}\n")
    assert main(["--config", str(path), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["collector"]["receiver"]["port"] == 4400
    assert printed["collector"]["sinks"]["prometheus"]["enabled"] is True
    assert "hunter2" not in str(printed)
    assert main(["--config", str(write(tmp_path, "receiver: {port: 99999}"))]) == 2
    assert "collector.receiver.port" in capsys.readouterr().err


def test_the_label_limits_are_keys_of_the_limits_section():
    from collector.pipeline import Pipeline
    from telemetry.config import LabelLimits

    limits = default_config().limits
    assert isinstance(limits, LabelLimits)  # one schema: the decoder takes it as it is
    label_keys = {f.name for f in dataclasses.fields(LabelLimits)}
    assert label_keys < {f.name for f in dataclasses.fields(limits)}
    config = from_dict(
        {
            "limits": {
                "heavy_request_bytes": 4096,
                "max_attributes_per_point": 8,
                "retry_after_s": 2.0,
            }
        }
    )
    pipeline = Pipeline([], None, config.limits)
    assert pipeline.limits is config.limits
    assert pipeline.limits.heavy_request_bytes == 4096
    assert pipeline.limits.retry_after_s == 2.0
    assert pipeline.decoder.label_limits is config.limits
    assert pipeline.decoder.label_limits.max_attributes_per_point == 8
    with pytest.raises(ConfigError, match="limits.max_metric_name_length"):
        from_dict({"limits": {"max_metric_name_length": 0}})
