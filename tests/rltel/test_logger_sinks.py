"""The StatsLogger's sinks: the companions (``samples.jsonl``) beside the others, never
alone, never beside OTLP; its sinks found by the factory that built them."""

from __future__ import annotations

from exporters import otlp, samples_file
from exporters.base import InMemorySink
from exporters.factory import BuildContext
from exporters.fanout import FanOut
from exporters.samples_file import SamplesFileSink
from rltel.logger_sinks import logger_sinks
from telemetry.config import StatsLoggerConfig


def built(config: StatsLoggerConfig, given=None) -> list:
    sinks = logger_sinks(config, given, BuildContext())
    for sink in sinks:
        sink.shutdown()
    return [type(sink).__name__ for sink in sinks]


def test_the_samples_file_goes_beside_built_or_given_sinks_never_alone(tmp_path):
    on = StatsLoggerConfig(fileroot=str(tmp_path), console={"enabled": True})
    assert built(on) == ["ConsoleSink", "SamplesFileSink"]
    alone = StatsLoggerConfig(fileroot=str(tmp_path), console={"enabled": False})
    assert built(alone) == []  # commit logs nothing: warned, no samples file either
    assert built(alone, [InMemorySink()]) == ["InMemorySink", "SamplesFileSink"]
    assert built(on, [InMemorySink()]) == ["InMemorySink", "SamplesFileSink"]  # given win
    assert built(alone, []) == []


def test_beside_otlp_no_samples_file_the_collector_writes_it(tmp_path):
    remote = StatsLoggerConfig(fileroot=str(tmp_path), otlp={"endpoint": "127.0.0.1:9"})
    sinks = logger_sinks(remote, [InMemorySink()], BuildContext())
    fanout = FanOut(sinks)
    try:
        assert [type(sink).__name__ for sink in sinks] == ["InMemorySink", "OtlpSink"]
        assert fanout.built_by(otlp.FACTORY) is sinks[1]
        assert fanout.built_by(samples_file.FACTORY) is None
    finally:
        fanout.shutdown(2.0)


def test_a_sink_built_by_hand_is_found_by_no_factory(tmp_path):
    fanout = FanOut([SamplesFileSink(tmp_path)])  # named "samples", built by no factory
    try:
        assert fanout.built_by(samples_file.FACTORY) is None
    finally:
        fanout.shutdown(1.0)
