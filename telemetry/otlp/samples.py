"""A Snapshot's rollout samples <-> an OTLP logs request: the pure pair of the logs signal.

Mapping (one ``LogRecord`` per :class:`~telemetry.model.sample.Sample`, all under one
``ResourceLogs`` whose resource is the snapshot's resource attributes plus ``rltel.stream``,
as the metrics of the same snapshot, and the scope ``rltel``):

- ``event_name`` = ``rltel.sample``; ``time_unix_nano`` = the snapshot's time;
- ``body`` = a key-value list of the text fields, in the order logged (string values);
- attributes: ``rltel.sample.stream`` (the sample's stream), ``train.step`` (the snapshot's
  global step, when it has one), each numeric field as ``rltel.sample.number.<name>``
  (a double, in the order logged), and ``rltel.sample.truncated`` (an array of the names
  of the text fields cut at the limit; absent when none was).

A text field cut at the limit keeps its mark (``…[truncated]``) in its text. A record
without ``rltel.sample.stream`` (another sender's log) is no sample: the decoder skips it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from telemetry.model import names
from telemetry.model.sample import Sample
from telemetry.model.snapshot import Attributes, AttributeValue, Snapshot
from telemetry.otlp.encode import plain_attribute
from telemetry.otlp.values import plain

__all__ = [
    "EVENT_NAME",
    "NUMBER_PREFIX",
    "STEP_ATTRIBUTE",
    "STREAM_ATTRIBUTE",
    "TRUNCATED_ATTRIBUTE",
    "ReceivedSample",
    "decode_samples",
    "encode_samples",
]

EVENT_NAME = "rltel.sample"
STREAM_ATTRIBUTE = "rltel.sample.stream"
STEP_ATTRIBUTE = "train.step"
NUMBER_PREFIX = "rltel.sample.number."
TRUNCATED_ATTRIBUTE = "rltel.sample.truncated"
SCOPE_NAME = "rltel"


@dataclass(frozen=True, slots=True)
class ReceivedSample:
    """A sample as a logs request carried it.

    Attributes:
        sample: the sample's stream and fields.
        step: the global step it was kept at, None when the sender had no step.
        resource: the resource attributes of the process that logged it (``rltel.stream``
            included).
        time_unix_nano: the time of the snapshot that carried it.
    """

    sample: Sample
    step: int | None
    resource: Attributes
    time_unix_nano: int


def encode_samples(snapshot: Snapshot) -> ExportLogsServiceRequest:
    """The logs request of ``snapshot``'s samples (no record when it has none)."""
    request = ExportLogsServiceRequest()
    if not snapshot.samples:
        return request
    resource_logs = request.resource_logs.add()
    for name, value in snapshot.resource:
        resource_logs.resource.attributes.append(_key_value(name, plain_attribute(value)))
    resource_logs.resource.attributes.append(_key_value(names.STREAM, str(snapshot.stream)))
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = SCOPE_NAME
    step = None if snapshot.step is None else int(snapshot.step.global_step)
    for sample in snapshot.samples:
        record = scope_logs.log_records.add()
        record.event_name = EVENT_NAME
        record.time_unix_nano = int(snapshot.time_unix_nano)
        for name, text in sample.text:
            record.body.kvlist_value.values.append(_key_value(name, str(text)))
        if not sample.text:
            record.body.kvlist_value.SetInParent()  # an empty map, still a sample's body
        record.attributes.append(_key_value(STREAM_ATTRIBUTE, sample.stream))
        if step is not None:
            record.attributes.append(_key_value(STEP_ATTRIBUTE, step))
        for name, number in sample.numbers:
            record.attributes.append(_key_value(NUMBER_PREFIX + name, float(number)))
        if sample.truncated:
            truncated = KeyValue(key=TRUNCATED_ATTRIBUTE)
            for name in sample.truncated:
                truncated.value.array_value.values.add().string_value = name
            record.attributes.append(truncated)
    return request


def decode_samples(request: ExportLogsServiceRequest) -> list[ReceivedSample]:
    """Every sample of ``request``, in order, with its step and resource.

    Records without ``rltel.sample.stream`` (not samples) are skipped.
    """
    out: list[ReceivedSample] = []
    for resource_logs in request.resource_logs:
        resource = tuple((kv.key, plain(kv.value)) for kv in resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                received = _sample(record, resource)
                if received is not None:
                    out.append(received)
    return out


def _sample(record: LogRecord, resource: Attributes) -> ReceivedSample | None:
    stream: str | None = None
    step: int | None = None
    numbers: list[tuple[str, float]] = []
    truncated: tuple[str, ...] = ()
    for kv in record.attributes:
        if kv.key == STREAM_ATTRIBUTE:
            stream = kv.value.string_value
        elif kv.key == STEP_ATTRIBUTE:
            step = int(kv.value.int_value)
        elif kv.key.startswith(NUMBER_PREFIX):
            numbers.append((kv.key[len(NUMBER_PREFIX) :], float(plain(kv.value))))
        elif kv.key == TRUNCATED_ATTRIBUTE:
            truncated = tuple(value.string_value for value in kv.value.array_value.values)
    if stream is None:
        return None
    text = tuple((kv.key, kv.value.string_value) for kv in record.body.kvlist_value.values)
    sample = Sample(stream, text=text, numbers=tuple(numbers), truncated=truncated)
    return ReceivedSample(sample, step, resource, int(record.time_unix_nano))


def _key_value(name: str, value: AttributeValue) -> KeyValue:
    kv = KeyValue(key=str(name))
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = str(value)
    return kv
