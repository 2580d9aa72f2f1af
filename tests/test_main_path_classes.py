"""bench/main_path_classes.py: the static count reads class statements, the tracer sees the path."""

from __future__ import annotations

from bench.main_path_classes import STATIC_AREAS, static_classes, trace_path


def test_static_count_takes_public_top_level_classes_of_each_areas_modules(tmp_path):
    record = tmp_path / "telemetry" / "record"
    (record / "deeper").mkdir(parents=True)
    (record / "a.py").write_text(
        "class Public:\n    class Nested: ...\n"
        "class _Private: ...\n"
        "def f():\n    class Local: ...\n"
    )
    (record / "deeper" / "b.py").write_text("class InASubfolder: ...\n")
    (tmp_path / "rltel").mkdir()
    (tmp_path / "rltel" / "logger_x.py").write_text("class LoggerPart: ...\n")
    (tmp_path / "rltel" / "other.py").write_text("class NotOnThePath: ...\n")
    (tmp_path / "collector").mkdir()
    (tmp_path / "collector" / "c.py").write_text("class One: ...\nclass Two(One): ...\n")

    found = static_classes(tmp_path)

    assert set(found) == set(STATIC_AREAS)
    assert found["recording"] == ["telemetry.record.a.Public"]
    assert found["logger -> sink"] == ["rltel.logger_x.LoggerPart"]
    assert found["collector"] == ["collector.c.One", "collector.c.Two"]


def test_the_tracer_sees_a_stat_from_the_tracker_to_the_collectors_prometheus_sink():
    tracer = trace_path()
    traced = tracer.classes
    on_the_path = {
        "telemetry.record.tracker.DistributedStatsTracker",  # stat() and export()
        "rltel.logger.StatsLogger",  # commit
        "exporters.otlp.sink.OtlpSink",  # the trainer's sink
        "exporters.queued.QueuedSink",  # its queue
        "collector.server.CollectorServer",  # Export
        "collector.pipeline.Pipeline",
        "exporters.prometheus.sink.PrometheusSink",  # the collector's sink and /metrics
    }
    assert on_the_path <= traced
    chains = tracer.chains
    assert set(chains) == {"caller", "queue", "sink call"}
    assert chains["caller"][0] == "StatsLogger.commit" and chains["caller"][-1].endswith(".offer")
    assert chains["queue"][-1] == "TimedCaller.call"
    assert chains["sink call"][-1] == "OtlpSink.export"
