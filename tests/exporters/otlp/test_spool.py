"""Spool: exact JSON round trip, FIFO order across processes, exact drop counts at the limit,
records torn or changed on disk never read back as entries."""

from __future__ import annotations

import logging
import math

import pytest

from exporters.otlp import spool as spool_module
from exporters.otlp.spool import Spool, batch_from_json, batch_to_json
from exporters.record_log import HEADER
from telemetry.model.snapshot import (
    Counter,
    Gauge,
    Histogram,
    ScalarMean,
    Snapshot,
    StatReduce,
    Step,
)
from telemetry.otlp.encode import Batch


def batch(step: int, n: int = 3) -> Batch:
    points = tuple(ScalarMean(f"g/{i}", float(step * 100 + i), count=i + 1) for i in range(n))
    snapshot = Snapshot(points, Step(0, step, step), (("rltel.role", "trainer"),), step, "train")
    return Batch(snapshot, window_start_unix_nano=step - 1, start_unix_nano=1)


def entry_bytes(part: Batch) -> int:
    """The bytes a metric batch's entry holds: a record of its point count and its JSON."""
    return HEADER.size + len(f"{part.num_points}\n{batch_to_json(part)}".encode())


def test_round_trip_keeps_every_field():
    snapshot = Snapshot(
        points=(
            Histogram(
                "h",
                count=4,
                sum=-math.inf,
                min=None,
                max=2.0,
                bounds=(0.0, 1.0),
                bucket_counts=(1, 2, 1),
                reduce=StatReduce.MAX,
                unit="s",
                attributes=(("layer", 2), ("kind", "x"), ("flag", True), ("w", 0.5)),
            ),
            Histogram("empty", count=0, sum=0.0),
            Gauge("g", math.nan, unit="1"),
            ScalarMean("s", 0.25, count=8),
            Counter("c", 1e12, unit="{token}", start_time_unix_nano=42),
        ),
        step=Step(1, 2, 3),
        resource=(("rltel.rank", 0), ("service.name", "rltel")),
        time_unix_nano=123,
        stream="eval",
    )
    original = Batch(snapshot, 7, 5, cumulative_scalars=True)
    back = batch_from_json(batch_to_json(original))
    assert back.snapshot.points[0] == original.snapshot.points[0]
    assert back.snapshot.points[1] == original.snapshot.points[1]
    assert math.isnan(back.snapshot.points[2].value)
    assert back.snapshot.points[3:] == original.snapshot.points[3:]
    assert (back.snapshot.step, back.snapshot.resource) == (snapshot.step, snapshot.resource)
    assert (back.snapshot.time_unix_nano, back.snapshot.stream) == (123, "eval")
    assert (back.window_start_unix_nano, back.start_unix_nano, back.cumulative_scalars) == (
        7,
        5,
        True,
    )
    with pytest.raises(ValueError, match="format"):
        batch_from_json('{"format": 99}')


def test_fifo_order_survives_a_new_process(tmp_path):
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    for step in range(15):
        assert spool.append(batch(step))
    assert len(spool) == 15 and spool.points == 45 and spool.spooled_points == 45
    for step in range(5):
        assert spool.peek() == batch(step)
        spool.pop()
    reopened = Spool(tmp_path / "spool", limit_bytes=10**7)  # e.g. after a crash
    assert reopened.bytes == spool.bytes and reopened.points == spool.points == 30
    reopened.append(batch(15))
    steps = []
    while (head := reopened.peek()) is not None:
        steps.append(head.snapshot.step.global_step)
        reopened.pop()
    assert steps == list(range(5, 16))
    assert reopened.bytes == 0 and not list((tmp_path / "spool").glob("*.seg"))


def test_an_entry_cut_by_a_kill_is_never_read_back_and_later_ones_are(tmp_path):
    spool = Spool(tmp_path, limit_bytes=10**7)
    for step in range(3):
        spool.append(batch(step))
    (segment,) = tmp_path.glob("*.seg")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 7])  # the last write cut short
    reopened = Spool(tmp_path, limit_bytes=10**7)
    assert (len(reopened), reopened.points, reopened.unreadable) == (2, 6, 1)
    assert reopened.append(batch(3))  # into a segment of its own, after the torn bytes
    assert steps_on_disk(tmp_path) == [0, 1, 3]


def test_limit_drops_new_batches_and_counts_their_points_exactly(tmp_path):
    sizes = [entry_bytes(batch(step, n=step + 1)) for step in range(10)]
    limit = sum(sizes[:4]) + sizes[4] // 2  # the first 4 fit, the 5th does not
    spool = Spool(tmp_path, limit_bytes=limit)
    accepted = [spool.append(batch(step, n=step + 1)) for step in range(10)]
    assert accepted == [True] * 4 + [False] * 6
    assert spool.dropped_points == sum(range(5, 11)) and spool.dropped_batches == 6
    assert spool.bytes == sum(sizes[:4]) <= limit
    spool.pop()  # room again: the next batch fits
    assert spool.append(batch(10, n=1))
    assert spool.dropped_points == sum(range(5, 11))


def change_on_disk(directory, old: bytes, new: bytes) -> None:
    """Replace bytes in the one segment of ``directory`` (a disk that changed them)."""
    (segment,) = directory.glob("*.seg")
    data = segment.read_bytes()
    assert data.count(old) == 1
    segment.write_bytes(data.replace(old, new))


def test_unreadable_entry_is_dropped_and_counted(tmp_path):
    spool = Spool(tmp_path, limit_bytes=10**6)
    spool.append(batch(0, n=2))
    spool.append(batch(1, n=5))
    change_on_disk(tmp_path, b'"value":1.0', b'"value":7.0')  # step 0's g/1: valid JSON
    assert spool.peek() == batch(1, n=5)  # the CRC refused step 0
    assert spool.dropped_points == 2 and len(spool) == 1


def test_limit_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="limit_bytes"):
        Spool(tmp_path, limit_bytes=0)


def test_a_limit_of_one_byte_is_allowed_and_a_batch_that_exactly_fills_the_limit_fits(tmp_path):
    tiny = Spool(tmp_path / "tiny", limit_bytes=1)
    assert not tiny.append(batch(0)) and tiny.dropped_batches == 1
    size = entry_bytes(batch(0))
    exact = Spool(tmp_path / "exact", limit_bytes=2 * size)
    assert exact.append(batch(0)) and exact.append(batch(0))  # exactly at the limit
    assert exact.bytes == 2 * size
    short = Spool(tmp_path / "short", limit_bytes=2 * size - 1)
    assert short.append(batch(0)) and not short.append(batch(0))  # one byte over
    assert (short.bytes, short.dropped_points, short.dropped_batches) == (size, 3, 1)


def test_the_spool_directory_and_its_parents_are_created(tmp_path):
    spool = Spool(tmp_path / "run" / "otlp" / "spool", limit_bytes=10**6)
    assert spool.append(batch(0))
    assert len(list((tmp_path / "run" / "otlp" / "spool").glob("*.seg"))) == 1


def steps_on_disk(directory) -> list[int]:
    """Every step a fresh process would replay from ``directory``, in order."""
    spool = Spool(directory, limit_bytes=10**7)
    steps = []
    while (head := spool.peek()) is not None:
        steps.append(head.snapshot.step.global_step)
        spool.pop()
    return steps


@pytest.mark.parametrize("before", [1, 4])
def test_appends_after_a_restart_go_after_the_entries_left_on_disk(tmp_path, before):
    first = Spool(tmp_path, limit_bytes=10**7)
    for step in range(before):
        assert first.append(batch(step))
    second = Spool(tmp_path, limit_bytes=10**7)  # a new process finds `before` entries
    assert len(second) == before
    assert second.append(batch(before)) and second.append(batch(before + 1))
    assert steps_on_disk(tmp_path) == list(range(before + 2))


def test_files_that_are_not_entries_are_left_alone(tmp_path):
    spool = Spool(tmp_path, limit_bytes=10**7)
    for step in range(3):
        spool.append(batch(step))
    for name in ("0-x.json", "x-3.json", "notes.json"):  # "0-x" sorts before every entry
        (tmp_path / name).write_text("{}")
    reopened = Spool(tmp_path, limit_bytes=10**7)
    assert len(reopened) == 3 and reopened.points == 9
    assert steps_on_disk(tmp_path) == [0, 1, 2]
    assert {p.name for p in tmp_path.iterdir()} == {"0-x.json", "x-3.json", "notes.json", "acked"}


def test_a_batch_that_cannot_be_written_is_dropped_and_counted(tmp_path):
    spool = Spool(tmp_path / "spool", limit_bytes=10**7)
    assert spool.append(batch(0))
    for path in (tmp_path / "spool").iterdir():  # the run directory was cleaned up
        path.unlink()
    (tmp_path / "spool").rmdir()
    assert not spool.append(batch(1, n=4))
    assert (spool.dropped_points, spool.dropped_batches, spool.spooled_points) == (4, 1, 3)


def test_an_entry_removed_from_disk_is_dropped_and_the_next_one_replayed(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "SEGMENT_BYTES", 1)  # one entry per segment
    spool = Spool(tmp_path, limit_bytes=10**7)
    for step in range(3):
        spool.append(batch(step, n=step + 1))
    min(tmp_path.glob("*.seg")).unlink()  # removed by hand
    assert spool.peek() == batch(1, n=2)
    assert (spool.dropped_points, spool.dropped_batches, len(spool)) == (1, 1, 2)


def test_an_unreadable_entry_counts_one_dropped_batch(tmp_path):
    spool = Spool(tmp_path, limit_bytes=10**6)
    for step in range(3):
        spool.append(batch(step, n=2))
    for value in (b"0.0", b"100.0"):  # each step's g/0, the same length not JSON
        change_on_disk(tmp_path, b'"value":' + value, b'"value":{' + b"x" * (len(value) - 2) + b"}")
    assert spool.peek() == batch(2, n=2)
    assert (spool.dropped_points, spool.dropped_batches) == (4, 2)


# An entry as format 1 writes it on disk (kept verbatim: entries outlive the process,
# so a spool must still read what an earlier run of this format left).
FORMAT_1_ENTRY = (
    '{"format":1,"window_start":4,"start":1,"cumulative_scalars":false,"time":5,'
    '"stream":"train","resource":[["rltel.role","trainer"]],"step":[0,5,5],'
    '"points":[{"metric":"g/0","unit":"","attributes":[],"kind":"gauge","value":500.0,'
    '"count":1}]}'
)


def test_an_entry_of_format_1_reads_back_and_other_formats_are_refused():
    back = batch_from_json(FORMAT_1_ENTRY)
    assert back == batch(5, n=1)
    for other in ('"format":0', '"format":2', '"format":null'):
        with pytest.raises(ValueError, match="format"):
            batch_from_json(FORMAT_1_ENTRY.replace('"format":1', other))


@pytest.mark.parametrize("kind", ["aaa", "summary", "zzz", "exponential_histogram"])
def test_an_unknown_point_kind_is_refused(kind):
    text = FORMAT_1_ENTRY.replace('"kind":"gauge"', f'"kind":"{kind}"')
    with pytest.raises(ValueError, match="unknown point kind"):
        batch_from_json(text)


def warnings_of(caplog, logger: str = "exporters.otlp.spool") -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == logger
    ]


def test_a_full_disk_is_logged_once_when_writes_fail_and_once_when_they_work_again(tiny_fs, caplog):
    spool = Spool(tiny_fs / "spool", limit_bytes=10**9)
    step = 0
    while spool.append(batch(step, n=200)):  # until the 2 MiB filesystem is full
        step += 1
    for more in range(1, 30):
        assert not spool.append(batch(step + more, n=200))
    assert spool.dropped_batches == 30 and spool.dropped_points == 30 * 200
    failed = warnings_of(caplog)
    assert len(failed) == 1 and "cannot write" in failed[0] and "No space left" in failed[0]
    first = min(spool.directory.glob("*.seg"))
    while first.exists():
        spool.pop()  # delivered: the first segment goes, room on disk again
    (ack,) = warnings_of(caplog, "exporters.record_log")  # until then no ack could be written
    assert ack.startswith(f"log {spool.directory}: cannot record ack 0: ") and "No space" in ack
    assert spool.append(batch(1000, n=200))
    recovered = warnings_of(caplog)[1:]
    assert recovered == [
        f"otlp spool: {spool.directory} takes writes again; 30 batches "
        "(6000 points) were dropped meanwhile"
    ]
    assert Spool(spool.directory, 10**9).unreadable == 0  # no torn entry left behind


def test_the_byte_limit_is_logged_once_when_reached_and_once_when_there_is_room(tmp_path, caplog):
    first, second = (entry_bytes(batch(step)) for step in (0, 1))
    limit = first + second + first // 2  # two batches fit, a third does not
    spool = Spool(tmp_path, limit_bytes=limit)
    assert spool.append(batch(0)) and spool.append(batch(1))
    for step in range(2, 12):
        assert not spool.append(batch(step))
    (full,) = warnings_of(caplog)
    assert f"limit of {limit} bytes" in full and "otlp.spool_limit_bytes" in full
    spool.pop()
    assert spool.append(batch(12))
    assert warnings_of(caplog)[1:] == [
        f"otlp spool: {tmp_path} has room again; 10 batches (30 points) were dropped meanwhile"
    ]
