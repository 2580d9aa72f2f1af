"""telemetry/otlp/samples.py: a snapshot's samples as an OTLP logs request and back."""

from __future__ import annotations

import math

import numpy as np
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from telemetry.model.sample import TRUNCATION_MARK, Sample
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.samples import decode_samples, encode_samples

RESOURCE = (
    ("rltel.experiment", "exp"),
    ("rltel.trial", "t1"),
    ("rltel.rank", np.int64(3)),  # numpy values are written as plain ones
    ("rltel.closed", False),
    ("rltel.share", 0.5),
)
SAMPLES = (
    Sample(
        "rollout",
        text=(("prompt", "2+2=?"), ("completion", "4 … ünïcödé" + TRUNCATION_MARK)),
        numbers=(("reward", 1.0), ("length", 12.0), ("advantage", -0.25)),
        truncated=("completion",),
    ),
    Sample("rollout", text=(("prompt", ""),), numbers=(("reward", -math.inf),)),
    Sample("eval-rollout", numbers=(("reward", 0.0),)),  # numbers only
    Sample("my-stream", text=(("completion", "x" * 5000),)),  # text only, no numbers
    Sample("rollout"),  # neither
)


STEP = Step(1, 2, 7)


def snapshot(step: Step | None = STEP, samples=SAMPLES) -> Snapshot:
    return Snapshot(
        points=(Gauge("x", 1.0),),
        step=step,
        resource=RESOURCE,
        time_unix_nano=1_700_000_000_123_456_789,
        stream="rollout",
        samples=samples,
    )


def wire(request: ExportLogsServiceRequest) -> ExportLogsServiceRequest:
    """Through bytes, as a receiver reads it."""
    return ExportLogsServiceRequest.FromString(request.SerializeToString())


def test_every_field_kind_round_trips():
    got = decode_samples(wire(encode_samples(snapshot())))
    assert [received.sample for received in got] == list(SAMPLES)
    assert {received.step for received in got} == {7}
    assert {received.time_unix_nano for received in got} == {1_700_000_000_123_456_789}
    expected_resource = (
        ("rltel.experiment", "exp"),
        ("rltel.trial", "t1"),
        ("rltel.rank", 3),
        ("rltel.closed", False),
        ("rltel.share", 0.5),
        ("rltel.stream", "rollout"),
    )
    assert all(received.resource == expected_resource for received in got)
    assert got[0].sample.text[1][1].endswith(TRUNCATION_MARK)
    assert got[0].sample.truncated == ("completion",)


def test_nan_reward_and_no_step_round_trip():
    samples = (Sample("rollout", numbers=(("reward", math.nan),)),)
    (got,) = decode_samples(wire(encode_samples(snapshot(step=None, samples=samples))))
    assert got.step is None
    assert math.isnan(got.sample.number("reward"))


def test_the_wire_form_is_the_documented_mapping():
    """Read with protobuf's JSON form, not with the decoder under test."""
    data = MessageToDict(encode_samples(snapshot()))
    (resource_logs,) = data["resourceLogs"]
    assert resource_logs["scopeLogs"][0]["scope"]["name"] == "rltel"
    first = resource_logs["scopeLogs"][0]["logRecords"][0]
    assert first["eventName"] == "rltel.sample"
    assert first["timeUnixNano"] == "1700000000123456789"
    body = {kv["key"]: kv["value"]["stringValue"] for kv in first["body"]["kvlistValue"]["values"]}
    assert body == {"prompt": "2+2=?", "completion": "4 … ünïcödé" + TRUNCATION_MARK}
    attributes = {kv["key"]: kv["value"] for kv in first["attributes"]}
    assert attributes == {
        "rltel.sample.stream": {"stringValue": "rollout"},
        "train.step": {"intValue": "7"},
        "rltel.sample.number.reward": {"doubleValue": 1.0},
        "rltel.sample.number.length": {"doubleValue": 12.0},
        "rltel.sample.number.advantage": {"doubleValue": -0.25},
        "rltel.sample.truncated": {"arrayValue": {"values": [{"stringValue": "completion"}]}},
    }
    records = resource_logs["scopeLogs"][0]["logRecords"]
    assert len(records) == len(SAMPLES)
    assert "rltel.sample.truncated" not in {kv["key"] for kv in records[1]["attributes"]}


def test_no_samples_no_record():
    assert encode_samples(snapshot(samples=())).ByteSize() == 0
    assert decode_samples(ExportLogsServiceRequest()) == []


def test_other_senders_records_are_skipped():
    request = encode_samples(snapshot())
    other = request.resource_logs[0].scope_logs[0].log_records.add()
    other.body.string_value = "a plain log line"
    got = decode_samples(wire(request))
    assert [received.sample for received in got] == list(SAMPLES)
