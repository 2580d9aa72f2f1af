"""The remote-write messages (``prometheus.WriteRequest``), declared from the schema.

Only the fields this sink writes of ``prompb/remote.proto`` and ``prompb/types.proto``:
``WriteRequest.timeseries = 1``, ``TimeSeries.labels = 1, samples = 2``, ``Label.name = 1,
value = 2``, ``Sample.value = 1 (double), timestamp = 2 (int64 ms)``. Serialized
WriteRequests concatenate into one WriteRequest (repeated fields append), which is how the
sink batches its backlog.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="rltel/prompb_remote.proto", package="prometheus", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        msg = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            entry = msg.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = type_name

    one, many = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    message(
        "Sample", ("value", 1, _F.TYPE_DOUBLE, one, ""), ("timestamp", 2, _F.TYPE_INT64, one, "")
    )
    message("Label", ("name", 1, _F.TYPE_STRING, one, ""), ("value", 2, _F.TYPE_STRING, one, ""))
    message(
        "TimeSeries",
        ("labels", 1, _F.TYPE_MESSAGE, many, ".prometheus.Label"),
        ("samples", 2, _F.TYPE_MESSAGE, many, ".prometheus.Sample"),
    )
    message("WriteRequest", ("timeseries", 1, _F.TYPE_MESSAGE, many, ".prometheus.TimeSeries"))
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
WriteRequest = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("prometheus.WriteRequest")
)

Sample = tuple[Sequence[tuple[str, str]], float, int]
"""One sample: its labels (``__name__`` included, sorted by name), value and timestamp (ms)."""


def encode(samples: Iterable[Sample]) -> tuple[bytes, int]:
    """A serialized WriteRequest of one time series per sample, and its number of samples.

    Returns:
        ``(bytes, number of samples)``.
    """
    request = WriteRequest()
    n = 0
    for labels, value, timestamp_ms in samples:
        ts = request.timeseries.add()
        for name, text in labels:
            ts.labels.add(name=name, value=text)
        ts.samples.add(value=value, timestamp=timestamp_ms)
        n += 1
    return request.SerializeToString(), n


def each_sample(payload: bytes) -> list[bytes]:
    """Every sample of a serialized WriteRequest as a serialized WriteRequest of its own, in
    the request's order (series by series, each series' samples in order); joined, any run
    of them is a valid WriteRequest."""
    out = []
    for series in WriteRequest.FromString(payload).timeseries:
        for sample in series.samples:
            one = WriteRequest()
            ts = one.timeseries.add()
            ts.labels.extend(series.labels)
            ts.samples.append(sample)
            out.append(one.SerializeToString())
    return out


def decode(payload: bytes) -> list[tuple[dict[str, str], list[tuple[float, int]]]]:
    """``[(labels, [(value, timestamp_ms), ...]), ...]`` of a serialized WriteRequest."""
    request = WriteRequest.FromString(payload)
    return [
        (
            {label.name: label.value for label in ts.labels},
            [(s.value, s.timestamp) for s in ts.samples],
        )
        for ts in request.timeseries
    ]
