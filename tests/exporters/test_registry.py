"""The sink registry: every sink package found, each with a config section, chosen by place."""

from __future__ import annotations

from collector.config import SinksConfig
from exporters import registry
from telemetry.config import StatsLoggerConfig


def test_every_sink_package_is_found_and_has_a_config_section_with_its_switch():
    names = [factory.name for factory in registry.factories()]
    assert names[:-1] == sorted(names[:-1]) and names[-1] == "samples"  # companions last
    assert {"console", "otlp", "prometheus", "remote_write", "tensorboard"} <= set(names)
    for factory in registry.factories():
        holders = [c for c in (StatsLoggerConfig(), SinksConfig()) if hasattr(c, factory.name)]
        assert holders, f"{factory.name}: no config declares its section"
        assert all(hasattr(getattr(c, factory.name), factory.switch) for c in holders)


def test_the_collector_builds_shared_and_per_run_sinks_by_the_factories_place():
    shared = registry.enabled(SinksConfig(), shared=True)
    assert [factory.name for factory in shared] == ["prometheus"]  # on; remote_write off
    run = StatsLoggerConfig(console={"enabled": True}, tensorboard={"path": "tb"})
    assert [factory.name for factory in registry.enabled(run, shared=False)] == [
        "console",
        "tensorboard",
        "samples",  # samples.jsonl: on by default, built after the others
    ]
    remote = StatsLoggerConfig(otlp={"endpoint": "127.0.0.1:4317"}, console={"enabled": True})
    remote_only = [factory.name for factory in registry.enabled(remote)]
    assert remote_only == ["otlp"]  # the collector runs the others


def test_switch_keys_name_every_sink_a_config_has_a_section_for():
    config = StatsLoggerConfig()
    assert registry.switch_keys(config, "stats_logger", remote=True) == [
        "stats_logger.otlp.endpoint"
    ]
    local = registry.switch_keys(config, "stats_logger", remote=False)
    assert "stats_logger.console.enabled" in local and "stats_logger.wandb.mode" in local
    assert all("remote_write" not in key for key in local)  # the collector's only
