"""The points every producer emits, pinned as OTLP bytes: unchanged by refactors, and
byte-identical through the collector's decoder and the encoder again."""

from __future__ import annotations

import difflib
import hashlib

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, StatReduce
from telemetry.otlp.decode import Decoder
from telemetry.otlp.encode import encode
from tests.telemetry import golden_recording as golden

GOLDEN_SHA256 = "040dbcbb95c75c014c68ed01b309f4bbb0d6f247c74f66a84f0623bb613bd6f3"


def test_the_fixed_recording_encodes_to_the_golden_bytes():
    payload = golden.request_bytes()
    text, want = golden.as_text(payload), golden.GOLDEN.read_text()
    diff = "\n".join(difflib.unified_diff(want.splitlines(), text.splitlines(), lineterm=""))
    assert text == want, f"points changed (golden file vs now):\n{diff[:6000]}"
    assert hashlib.sha256(payload).hexdigest() == GOLDEN_SHA256


def test_the_recording_covers_every_point_kind():
    points = golden.recording().points
    reduces = {p.reduce for p in points if isinstance(p, Histogram)}
    assert reduces == set(StatReduce) - {StatReduce.SCALAR}
    assert any(isinstance(p, Histogram) and p.bucket_counts for p in points)
    assert any(isinstance(p, ScalarMean) for p in points)
    assert any(isinstance(p, Gauge) and p.attributes for p in points)
    assert any(isinstance(p, Counter) for p in points)
    keys = {p.metric for p in points}
    for producer in ("moe_balance/", "train_perf/", "twinkle/", "rollout/", "train_infer/"):
        assert any(producer in key for key in keys), producer
    for view in ("/rank_min", "/slowest_rank", "/per_rank"):
        assert any(key.endswith(view) for key in keys), view


def test_decode_then_encode_gives_the_same_bytes():
    payload = golden.request_bytes()
    result = Decoder(started_ns=0).decode(ExportMetricsServiceRequest.FromString(payload))
    assert result.rejected == 0
    (snapshot,) = result.snapshots
    by_key = {point.key: point for point in golden.recording().points}
    assert {point.key: point for point in snapshot.points} == by_key
    assert len(snapshot.points) == len(by_key)
    (data,) = encode(
        snapshot, window_start_unix_nano=golden.WINDOW_START, start_unix_nano=golden.START
    )
    assert encode_metrics(data).SerializeToString(deterministic=True) == payload
