"""The ``samples.jsonl`` sink through the registry: built by its factory, after the others,
only when ``samples.jsonl`` is on (its writes: tests/collector/test_samples_restart_rules.py)."""

from __future__ import annotations

from exporters import console, registry, samples_file
from exporters.factory import BuildContext
from exporters.samples_file import SamplesFileSink
from telemetry.config import StatsLoggerConfig
from telemetry.model.sample import Sample
from telemetry.model.snapshot import Gauge, Snapshot, Step


def contract_config(tmp_path, stack):
    """The samples file of the sink contract (tests/exporters/test_base.py)."""
    return StatsLoggerConfig(fileroot=str(tmp_path), console={"enabled": False}), BuildContext()


def test_the_registry_builds_the_samples_file_after_the_other_sinks(tmp_path):
    config = StatsLoggerConfig(fileroot=str(tmp_path), console={"enabled": True})
    sinks = registry.build_sinks(config)
    try:
        assert [type(sink) for sink in sinks] == [console.ConsoleSink, SamplesFileSink]
        assert [sink.factory for sink in sinks] == [console.FACTORY, samples_file.FACTORY]
        assert [sink.name for sink in sinks] == ["console", "samples"]
        sample = Sample("train", (("completion", "hi"),), ())
        sinks[1].export(Snapshot((Gauge("x", 1.0),), Step(0, 0, 3), samples=(sample,)))
    finally:
        for sink in sinks:
            sink.shutdown()
    assert (config.run_dir / "samples.jsonl").read_text().startswith('{"step": 3')


def test_the_samples_file_is_built_only_when_samples_jsonl_is_on():
    for samples in ({"jsonl": False}, {"enabled": False}):
        config = StatsLoggerConfig(console={"enabled": True}, samples=samples)
        assert [factory.name for factory in registry.enabled(config)] == ["console"]
    on = StatsLoggerConfig(console={"enabled": True})
    assert registry.enabled(on, companions=True) == [samples_file.FACTORY]
    assert registry.enabled(on, companions=False) == [console.FACTORY]


def test_the_samples_file_is_no_sink_that_makes_commit_log():
    local = registry.switch_keys(StatsLoggerConfig(), "stats_logger", remote=False)
    assert "stats_logger.console.enabled" in local
    assert all(not key.startswith("stats_logger.samples.") for key in local)
