"""The close that lands while a spooled request is being resent: the request stays on disk.

The exporter checks that it is not shut down, encodes the request (the SDK's
``encode_metrics``), then calls gRPC; a ``close`` in between closes the channel and gRPC
raises ``Cannot invoke RPC on closed channel!``. The test makes that order certain: it
watches the resending thread's own stack and closes the sink once that thread is inside
``encode_metrics``, past the exporter's check, with a real OTLP receiver on 127.0.0.1.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from exporters.base import ExportResult
from exporters.otlp.sink import OtlpSink
from exporters.otlp.spool import Spool
from rltel.logger import StatsLogger
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.encode import Batch
from tests.telemetry.otlp_receiver import Receiver

from .spooled import held

POINTS = 20_000  # the SDK's encoding of this many points takes a good fraction of a second


def inside(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is now running ``function`` (anywhere on its stack)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_a_close_during_a_resend_keeps_the_request_on_disk_and_refuses_nothing(tmp_path):
    spool = Spool(tmp_path / "spool", 1 << 30)
    points = tuple(Gauge(f"k/{i}", float(i)) for i in range(POINTS))
    assert spool.append(Batch(Snapshot(points, Step(0, 7, 7)), 0, 0, False))
    on_disk = held(spool.directory)
    with Receiver() as receiver:
        sink = OtlpSink(receiver.endpoint, spool=spool, timeout_s=30.0)
        assert sink.overflow is not None
        answer: list[ExportResult] = []
        resend = threading.Thread(target=lambda: answer.append(sink.overflow.replay(30.0)))
        resend.start()
        deadline = time.monotonic() + 60.0
        while not inside(resend, "encode_metrics"):  # past the exporter's shutdown check
            assert resend.is_alive() and time.monotonic() < deadline, "never encoded"
            time.sleep(0.001)
        sink.shutdown()  # what the close deadline does: the channel closes
        resend.join(60.0)
        assert receiver.requests == []
    assert answer == [ExportResult.FAILURE]  # not sent: retryable, not refused
    health = sink.health()
    assert health["points_failed"] == 0
    assert health["spool_points"] == POINTS
    assert held(spool.directory) == on_disk  # still on disk, for a flush


def test_the_close_line_counts_and_names_what_stays_on_disk(tmp_path, caplog):
    down = Receiver()  # never started: the collector is down for the whole run
    spool_dir = tmp_path / "spool"
    config = {"fileroot": str(tmp_path), "otlp": {"endpoint": down.endpoint}}
    config["otlp"]["spool_dir"] = str(spool_dir)
    stats = StatsLogger(config)
    for step in range(3, 8):
        stats.commit(0, step, step, {"loss": float(step)})
    with caplog.at_level(logging.WARNING, logger="rltel.logger"):
        stats.close(0.5)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "rltel.logger"]
    points = stats.otlp.health()["spool_points"]
    assert points > 0
    assert line == (
        f"otlp: closed with 6 requests ({points} points; steps 3-7) not acknowledged, kept in "
        f"{spool_dir / 'trainer'} for the next run, 0 points dropped (points_dropped), "
        f"0 points refused by the endpoint (points_failed); to send the spool now: "
        f"rltel spool flush {spool_dir} --endpoint {down.endpoint}"
    )
