"""A run closed and later resumed: its closed marker goes back to 0 (the stall alert's
``unless rltel_closed == 1`` watches it again); other runs keep theirs."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporters.prometheus import PrometheusSink
from rltel.logger import CLOSED_METRIC, STEP_METRIC
from telemetry.config import PrometheusConfig
from telemetry.model.snapshot import Gauge, Snapshot, Step


def resource(trial: str) -> tuple:
    return (
        ("service.name", "rltel-trainer"),
        ("rltel.experiment", "exp"),
        ("rltel.trial", trial),
        ("rltel.role", "trainer"),
        ("rltel.rank", 0),
        ("host.name", "node0"),
    )


def step(trial: str, n: int, closed: bool = False) -> Snapshot:
    points = (Gauge(STEP_METRIC, float(n)), Gauge("loss", 0.5))
    if closed:
        points = (Gauge(STEP_METRIC, float(n)), Gauge(CLOSED_METRIC, 1.0))
    return Snapshot(points, Step(0, n, n), resource(trial))


def closed_markers(sink: PrometheusSink) -> dict[str, float]:
    body, _ = sink.render()
    found = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return {s.labels["trial"]: s.value for s in found["rltel_closed"].samples}


def test_a_resumed_run_clears_its_closed_marker_and_closing_again_sets_it():
    sink = PrometheusSink(PrometheusConfig(), serve=False)
    for trial in ("resumed", "other"):
        sink.export(step(trial, 0))
        sink.export(step(trial, 0, closed=True))
    assert closed_markers(sink) == {"resumed": 1.0, "other": 1.0}
    sink.export(step("resumed", 1))  # a new process commits the next step of the same run
    assert closed_markers(sink) == {"resumed": 0.0, "other": 1.0}
    sink.export(step("resumed", 2))
    assert closed_markers(sink) == {"resumed": 0.0, "other": 1.0}
    sink.export(step("resumed", 2, closed=True))
    assert closed_markers(sink) == {"resumed": 1.0, "other": 1.0}
    sink.export(step("other", 1))
    assert closed_markers(sink) == {"resumed": 1.0, "other": 0.0}
