"""The JSON form of a batch: a scalar stream keeps the form written before ``ScalarMean``."""

from __future__ import annotations

from telemetry.model.snapshot import Gauge, ScalarMean, Snapshot, Step
from telemetry.otlp.batch import Batch, batch_from_json, batch_to_json

# Written by the version before ScalarMean, when a scalar stream was a Gauge with a count
# (kept verbatim: spool and journal entries outlive the process that wrote them).
EARLIER_ENTRY = (
    '{"format":1,"window_start":3,"start":1,"cumulative_scalars":true,"time":9,'
    '"stream":"rollout","resource":[["rltel.role","rollout"]],"step":[0,4,4],"points":['
    '{"metric":"rollout/reward","unit":"","attributes":[["task","math"]],"kind":"gauge",'
    '"value":0.25,"count":8},'
    '{"metric":"moe_balance/max_over_ideal","unit":"1","attributes":[["layer",3]],'
    '"kind":"gauge","value":1.25,"count":null}]}'
)

POINTS = (
    ScalarMean("rollout/reward", 0.25, 8, attributes=(("task", "math"),)),
    Gauge("moe_balance/max_over_ideal", 1.25, unit="1", attributes=(("layer", 3),)),
)


def test_a_gauge_entry_with_a_count_reads_back_as_a_scalar_mean():
    back = batch_from_json(EARLIER_ENTRY).snapshot.points
    assert [type(point) for point in back] == [ScalarMean, Gauge]
    assert back == POINTS


def test_a_scalar_mean_is_written_as_the_earlier_version_wrote_it():
    snapshot = Snapshot(POINTS, Step(0, 4, 4), (("rltel.role", "rollout"),), 9, "rollout")
    assert batch_to_json(Batch(snapshot, 3, 1, cumulative_scalars=True)) == EARLIER_ENTRY
