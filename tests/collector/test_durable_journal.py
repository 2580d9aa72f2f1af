"""The durable queue's journal: written before the answer, replayed in order by the next
process, deleted once the sink holds it; a queued sink behind it, across a restart."""

from __future__ import annotations

import os
import threading
import time

import pytest

from collector.signal_journal import request_journal
from exporters import journal as journal_module
from exporters import record_log
from exporters.base import ExportResult, InMemorySink
from exporters.journal import Checkpoints, Journal
from exporters.queued import QueuedSink
from telemetry.model.snapshot import Gauge, Histogram, ScalarMean, Snapshot, StatReduce, Step


def snap(step: int) -> Snapshot:
    points = (
        ScalarMean("train/loss", step + 0.5, count=3),
        Histogram("train/len", 4, 10.0, 1.0, 4.0, (2.0,), (1, 3), StatReduce.AVG_MIN_MAX),
    )
    return Snapshot(points, Step(0, step, step), (("rltel.experiment", "e"),), 7, "train")


def test_what_an_earlier_process_did_not_ack_comes_back_in_order(tmp_path):
    first = Journal(tmp_path, limit_bytes=1 << 20)
    seqs = [first.append(snap(step)) for step in range(5)]
    first.sync()
    assert seqs == [0, 1, 2, 3, 4]
    first.ack(1)  # the sink holds steps 0 and 1; the process dies without closing
    second = Journal(tmp_path, limit_bytes=1 << 20)
    assert [(seq, s.step.global_step) for seq, s in second.pending] == [(2, 2), (3, 3), (4, 4)]
    assert second.pending[0][1] == snap(2)  # the snapshot itself, every field
    assert second.append(snap(5)) == 5  # numbering goes on after the earlier process's


def test_a_torn_record_at_the_tail_is_skipped_and_later_appends_still_read(tmp_path):
    first = Journal(tmp_path, limit_bytes=1 << 20)
    for step in range(3):
        first.append(snap(step))
    (segment,) = tmp_path.glob("*.seg")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 5])  # the last write cut by a kill
    second = Journal(tmp_path, limit_bytes=1 << 20)
    assert [s.step.global_step for _, s in second.pending] == [0, 1]
    assert second.unreadable == 1
    second.append(snap(9))  # into a segment of its own
    third = Journal(tmp_path, limit_bytes=1 << 20)
    assert [s.step.global_step for _, s in third.pending] == [0, 1, 9]
    third.ack(99)
    third.close()
    assert list(tmp_path.glob("*.seg")) == []


def test_a_whole_record_failing_its_crc_is_skipped_and_the_records_after_it_read(tmp_path):
    first = Journal(tmp_path, limit_bytes=1 << 20)
    for step in range(4):
        first.append(snap(step))
    (segment,) = tmp_path.glob("*.seg")
    data = segment.read_bytes()
    assert data.count(b"1.5") == 1  # step 1's loss; 7.5 keeps the JSON valid
    segment.write_bytes(data.replace(b"1.5", b"7.5"))
    second = Journal(tmp_path, limit_bytes=1 << 20)
    assert [s.step.global_step for _, s in second.pending] == [0, 2, 3]
    assert second.pending[1][1] == snap(2)
    assert second.unreadable == 1


def test_a_record_whose_length_changed_ends_the_segment_there(tmp_path):
    first = Journal(tmp_path, limit_bytes=1 << 20)
    for step in range(3):
        first.append(snap(step))
    (segment,) = tmp_path.glob("*.seg")
    data = bytearray(segment.read_bytes())
    at = len(_record_bytes_of(data, 0))  # step 1's header: its length one byte longer
    data[at] += 1
    segment.write_bytes(bytes(data))
    second = Journal(tmp_path, limit_bytes=1 << 20)
    assert [s.step.global_step for _, s in second.pending] == [0]  # no framing to trust
    assert second.unreadable == 1


def _record_bytes_of(data: bytes | bytearray, at: int) -> bytes:
    size = int.from_bytes(data[at : at + 4], "little")
    return bytes(data[at : at + record_log.HEADER.size + size])


def test_a_segment_holding_only_a_torn_record_is_never_appended_to(tmp_path):
    first = Journal(tmp_path, limit_bytes=1 << 20)
    first.append(snap(0))
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes()[:7])  # killed inside its first record
    second = Journal(tmp_path, limit_bytes=1 << 20)
    assert second.pending == [] and second.unreadable == 1
    second.append(snap(1))
    assert len(list(tmp_path.glob("*.seg"))) == 2  # a new file, not after the torn bytes
    assert [s.step.global_step for _, s in Journal(tmp_path, 1 << 20).pending] == [1]


def test_segments_go_once_acked_and_full_holds_at_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(record_log, "SEGMENT_BYTES", 1)  # one record per segment
    journal = Journal(tmp_path, limit_bytes=3 * len(_record_bytes(tmp_path)))
    for step in range(3):
        assert not journal.full
        journal.append(snap(step))
    assert journal.full  # at the limit exactly
    assert len(list(tmp_path.glob("*.seg"))) == 3
    journal.ack(1)
    assert len(list(tmp_path.glob("*.seg"))) == 1 and not journal.full
    journal.ack(2)  # the open segment stays until it is closed
    journal.close()
    assert list(tmp_path.glob("*.seg")) == [] and journal.bytes == 0


def _record_bytes(tmp_path) -> bytes:
    probe = Journal(tmp_path / "probe", limit_bytes=1 << 20)
    probe.append(snap(0))
    probe.close()
    (segment,) = (tmp_path / "probe").glob("*.seg")
    return segment.read_bytes()


def test_a_failed_write_is_raised_by_the_next_sync(tmp_path, monkeypatch):
    journal = Journal(tmp_path, limit_bytes=1 << 20)
    journal.append(snap(0))

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    assert journal.append(snap(1)) is None
    with pytest.raises(OSError, match="No space"):
        journal.sync()
    journal.sync()  # raised once: the next request may succeed


def test_checkpoints_ack_after_a_flush_and_the_settle_time(tmp_path):
    journal = Journal(tmp_path, limit_bytes=1 << 20)
    for step in range(4):
        journal.append(snap(step))
    flushes: list[int] = []
    checkpoints = Checkpoints(journal, lambda: flushes.append(1) or True, settle_s=3600, every=2)
    checkpoints.done(0, idle=False)
    assert flushes == []
    checkpoints.done(1, idle=False)  # every 2: flushed, but not settled for an hour
    assert flushes == [1] and Journal(tmp_path, 1 << 20).pending[0][0] == 0
    checkpoints.final()  # the sink was shut down cleanly: everything done is held
    assert [seq for seq, _ in Journal(tmp_path, 1 << 20).pending] == [2, 3]


class Gate(InMemorySink):
    """Exports only while ``open`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        self.open.wait(30)
        return super().export(snapshot, timeout_s)


def test_a_queued_sink_replays_what_its_journal_holds_before_anything_new(tmp_path):
    stuck = Gate()  # the first process's sink never exports: the process is "killed"
    first = QueuedSink(stuck, queue_size=10)
    first.journal_to(Journal(tmp_path, 1 << 20))
    for step in range(3):
        assert first.submit(snap(step))
    first.journal.sync()

    sink = InMemorySink()
    second = QueuedSink(sink, queue_size=10)
    second.journal_to(Journal(tmp_path, 1 << 20))
    assert second.submit(snap(3))
    assert second.force_flush(30)
    assert [s.step.global_step for s in sink.snapshots] == [0, 1, 2, 3]
    second.shutdown(10)  # held: the journal is emptied
    assert Journal(tmp_path, 1 << 20).pending == []
    stuck.open.set()
    first.shutdown(10)


def _raw(tmp_path, limit_bytes: int = 1 << 30) -> Journal:
    return request_journal(tmp_path, limit_bytes, fsync=False)


def test_a_segment_takes_records_until_it_holds_4_mib(tmp_path):
    mib = b"x" * ((1 << 20) - record_log.HEADER.size)  # a record of 1 MiB
    short = _raw(tmp_path / "short")
    for payload in (mib, mib, mib, mib[:-1], b"next"):  # 4 MiB less one byte, then more
        short.append(payload)
    assert len(list((tmp_path / "short").glob("*.seg"))) == 1
    full = _raw(tmp_path / "full")
    for payload in (mib, mib, mib, mib, b"next"):  # 4 MiB exactly: the next starts anew
        full.append(payload)
    assert len(list((tmp_path / "full").glob("*.seg"))) == 2


def test_last_seq_is_the_last_record_written(tmp_path):
    journal = _raw(tmp_path)
    assert journal.last_seq == -1
    journal.append(b"a")
    journal.append(b"b")
    assert journal.last_seq == 1
    assert _raw(tmp_path).last_seq == 1  # and in the next process


def test_a_journal_at_its_limit_is_full_again_in_the_next_process(tmp_path):
    record = record_log.HEADER.size + 16  # 16: a bit the header's size holds too
    journal = _raw(tmp_path, limit_bytes=3 * record)
    for payload in (b"a" * 16, b"b" * 16, b"c" * 16):
        journal.append(payload)
    assert journal.full
    again = _raw(tmp_path, limit_bytes=3 * record)
    assert again.full and again.bytes == 3 * record
    again.append(b"d" * 16)  # past the limit: still full
    assert again.full
    again.ack(1)
    assert not again.full


def test_segments_go_only_once_every_record_in_them_is_acked(tmp_path, monkeypatch):
    record = record_log.HEADER.size + 1
    monkeypatch.setattr(record_log, "SEGMENT_BYTES", record + 1)  # two records each
    journal = _raw(tmp_path)
    for payload in b"abcdefgh":
        journal.append(bytes([payload]))
    assert len(list(tmp_path.glob("*.seg"))) == 4
    journal.ack(2)  # the second segment still holds record 3
    assert len(list(tmp_path.glob("*.seg"))) == 3
    assert [seq for seq, _ in _raw(tmp_path).pending] == [3, 4, 5, 6, 7]


def test_after_a_failed_write_the_next_record_gets_the_next_seq(tmp_path, monkeypatch):
    journal = _raw(tmp_path)
    journal.append(b"a")
    journal.append(b"b")
    real_write = os.write

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    assert journal.append(b"lost") is None
    monkeypatch.setattr(os, "write", real_write)
    assert journal.append(b"c") == 3 and journal.last_seq == 3
    assert _raw(tmp_path).pending == [(0, b"a"), (1, b"b"), (3, b"c")]


def test_an_ack_that_cannot_be_recorded_is_logged_and_replayed_once_more(tmp_path, caplog):
    journal = _raw(tmp_path)
    journal.append(b"a")
    (tmp_path / "acked").mkdir()  # the ack's file cannot be written
    journal.ack(0)
    assert "cannot record ack 0" in caplog.text
    caplog.clear()
    journal.ack(0)  # acked already: nothing to write
    assert caplog.records == []
    journal.ack(-1)  # an older ack: nothing either
    assert caplog.records == []
    assert not journal.full and _raw(tmp_path).pending == [(0, b"a")]


def test_a_snapshot_is_encoded_once_for_the_journals_it_goes_to():
    snapshot = snap(3)
    payload = journal_module.encoded(snapshot)
    assert journal_module.encoded(snapshot) is payload  # the same bytes, not encoded again
    assert journal_module.encoded(snap(3)) == payload


def test_checkpoints_flush_when_the_queue_runs_idle_at_most_every_interval(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b", b"c"):
        journal.append(payload)
    flushes: list[int] = []
    checkpoints = Checkpoints(journal, lambda: flushes.append(1) or True, interval_s=60)
    checkpoints.done(0, idle=True)  # idle, and never flushed (the clock counts from boot)
    assert flushes == [1] and [seq for seq, _ in _raw(tmp_path).pending] == [1, 2]
    checkpoints.done(1, idle=True)  # idle again within interval_s: not yet
    assert flushes == [1]


def test_checkpoints_ack_at_once_without_a_settle_time_and_not_after_a_failed_flush(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b", b"c"):
        journal.append(payload)
    held = [False]
    checkpoints = Checkpoints(journal, lambda: held[0], every=1)
    checkpoints.done(0, idle=False)  # the flush failed: nothing acked
    assert [seq for seq, _ in _raw(tmp_path).pending] == [0, 1, 2]
    held[0] = True
    checkpoints.done(1, idle=False)
    assert [seq for seq, _ in _raw(tmp_path).pending] == [2]


def test_fsync_only_with_fsync_once_per_dirty_sync_and_at_a_dirty_close(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    _raw(tmp_path / "off").append(b"a")
    off = request_journal(tmp_path / "off", 1 << 20, fsync=False)
    off.append(b"b")
    off.sync()
    off.close()
    assert synced == []
    on = request_journal(tmp_path / "on", 1 << 20, fsync=True)
    on.sync()  # nothing written: nothing to sync
    on.append(b"a")
    assert len(synced) == 1  # the directory, for the new segment's name
    on.sync()
    assert len(synced) == 2  # the segment
    on.sync()  # clean
    on.close()  # clean
    assert len(synced) == 2
    again = request_journal(tmp_path / "on", 1 << 20, fsync=True)
    again.append(b"b")
    again.close()  # dirty: synced before it closes
    assert len(synced) == 4
    request_journal(tmp_path / "default", 1 << 20).append(b"c")  # fsync by default
    assert len(synced) == 5
    Journal(tmp_path / "snapshots", 1 << 20).append(snap(1))  # a snapshot journal's too
    assert len(synced) == 6


def test_the_directory_is_made_with_its_parents_and_segments_are_0o644(tmp_path):
    journal = _raw(tmp_path / "state" / "sink")
    journal.append(b"a")
    (segment,) = (tmp_path / "state" / "sink").glob("*.seg")
    assert segment.stat().st_mode & 0o777 == 0o644 & ~_umask()
    _raw(tmp_path / "state" / "sink")  # and taken up again


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_stray_files_and_a_damaged_ack_file_are_no_records(tmp_path):
    journal = _raw(tmp_path)
    journal.append(b"a")
    journal.close()
    (tmp_path / "-notes.seg").write_bytes(b"not a segment")  # sorts before the segments
    (tmp_path / "acked").write_text("garbage")  # read as nothing acked
    again = _raw(tmp_path)
    assert again.pending == [(0, b"a")] and again.unreadable == 0
    assert (tmp_path / "-notes.seg").exists()


def test_a_record_that_checks_but_does_not_decode_is_counted_and_skipped(tmp_path, caplog):
    raw = _raw(tmp_path)
    raw.append(b"{not a snapshot")
    raw.close()
    journal = Journal(tmp_path, 1 << 20)
    journal.append(snap(1))
    again = Journal(tmp_path, 1 << 20)
    assert [seq for seq, _ in again.pending] == [1] and again.unreadable == 1
    assert "record 0 unreadable" in caplog.text
    journal.close()
    segment = sorted(tmp_path.glob("*.seg"))[-1]  # the one holding record 1
    with segment.open("ab") as torn:
        torn.write(b"\x07\x00")  # and a torn tail: the log's own count, added to the journal's
    assert Journal(tmp_path, 1 << 20).unreadable == 2


def test_checkpoints_flush_only_what_is_new_and_final_acks_only_what_is_done(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b"):
        journal.append(payload)
    flushes: list[int] = []
    checkpoints = Checkpoints(journal, lambda: flushes.append(1) or True, every=1)
    checkpoints.final()  # nothing done yet
    checkpoints.checkpoint()  # nothing given since the last flush
    assert flushes == [] and len(_raw(tmp_path).pending) == 2
    checkpoints.done(0, idle=False)
    checkpoints.checkpoint()  # flushed already
    assert flushes == [1] and _raw(tmp_path).pending == [(1, b"b")]


def test_a_failed_record_and_a_torn_tail_count_as_two_unreadable(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"aaaa", b"bbbb", b"cccc"):
        journal.append(payload)
    journal.close()
    (segment,) = tmp_path.glob("*.seg")
    data = segment.read_bytes().replace(b"aaaa", b"aaab")  # the first fails its CRC
    segment.write_bytes(data[:-1])  # the last is torn
    again = _raw(tmp_path)
    assert again.pending == [(1, b"bbbb")] and again.unreadable == 2


def test_bytes_counts_every_record_written(tmp_path):
    record = record_log.HEADER.size + 1
    journal = _raw(tmp_path)
    for payload in (b"a", b"b", b"c"):
        journal.append(payload)
    assert journal.bytes == 3 * record


def test_a_closed_segment_stays_while_its_last_records_are_unacked(tmp_path):
    journal = _raw(tmp_path)
    for payload in b"abcdef":
        journal.append(bytes([payload]))
    journal.ack(3)
    journal.close()  # the segment is not open any more: kept only for records 4 and 5
    assert [seq for seq, _ in _raw(tmp_path).pending] == [4, 5]


def test_checkpoints_flush_every_64_snapshots_by_default(tmp_path):
    flushes: list[int] = []
    checkpoints = Checkpoints(_raw(tmp_path), lambda: flushes.append(1) or True)
    for seq in range(63):
        checkpoints.done(seq, idle=False)
    assert flushes == []
    checkpoints.done(63, idle=False)
    assert flushes == [1]


def test_numbering_goes_on_after_the_ack_when_every_segment_is_gone(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b", b"c", b"d"):
        journal.append(payload)
    journal.ack(3)
    journal.close()
    assert list(tmp_path.glob("*.seg")) == []
    again = _raw(tmp_path)
    assert again.append(b"e") == 4
    assert _raw(tmp_path).pending == [(4, b"e")]


def test_a_killed_process_fully_acked_segment_goes_at_the_next_start(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b", b"c", b"d"):
        journal.append(payload)
    journal.ack(3)  # its segment stays while it is open; the process is killed
    assert len(list(tmp_path.glob("*.seg"))) == 1
    _raw(tmp_path)
    assert list(tmp_path.glob("*.seg")) == []


def test_a_torn_segment_of_an_odd_seq_is_never_appended_to(tmp_path):
    _raw(tmp_path).append(b"a")  # segment 0
    _raw(tmp_path).append(b"b")  # the next process: segment 1
    (torn,) = [path for path in tmp_path.glob("*.seg") if int(path.stem) == 1]
    torn.write_bytes(torn.read_bytes()[:7])  # killed inside it
    _raw(tmp_path).append(b"c")
    assert _raw(tmp_path).pending == [(0, b"a"), (2, b"c")]


def test_an_empty_record_at_the_end_is_a_record(tmp_path):
    journal = _raw(tmp_path)
    journal.append(b"a")
    journal.append(b"")  # an empty request
    again = _raw(tmp_path)
    assert again.pending == [(0, b"a"), (1, b"")] and again.unreadable == 0


def test_checkpoints_ack_once_the_settle_time_passed(tmp_path):
    journal = _raw(tmp_path)
    journal.append(b"a")
    journal.append(b"b")
    checkpoints = Checkpoints(journal, lambda: True, settle_s=0.05, every=1)
    checkpoints.done(0, idle=False)  # flushed: held 50 ms after that flush
    assert len(_raw(tmp_path).pending) == 2
    settled = time.monotonic() + 0.05
    while time.monotonic() <= settled:  # the clock passes the settle time
        threading.Event().wait(0.001)
    checkpoints.done(1, idle=False)  # flushed again: the first flush's data settled
    assert _raw(tmp_path).pending == [(1, b"b")]


def test_two_failed_records_in_a_row_end_the_segment_there(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"aaaa", b"bbbb", b"cccc"):
        journal.append(payload)
    journal.close()
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes().replace(b"aaaa", b"aaab").replace(b"bbbb", b"bbbc"))
    again = _raw(tmp_path)
    assert again.pending == [] and again.unreadable == 1  # no framing left to trust


def test_snapshots_that_compare_equal_but_encode_apart_are_encoded_each():
    zero = Snapshot((Gauge("train/loss", 0.0),), Step(0, 1, 1))
    negative_zero = Snapshot((Gauge("train/loss", -0.0),), Step(0, 1, 1))
    assert zero == negative_zero
    assert journal_module.encoded(zero) != journal_module.encoded(negative_zero)


def test_full_only_at_the_limit_not_a_byte_before(tmp_path):
    record = record_log.HEADER.size + 1
    journal = _raw(tmp_path, limit_bytes=record + 1)
    journal.append(b"a")
    assert not journal.full


def test_an_idle_queue_is_flushed_again_once_a_quarter_second_passed(tmp_path):
    journal = _raw(tmp_path)
    for payload in (b"a", b"b"):
        journal.append(payload)
    flushes: list[int] = []
    checkpoints = Checkpoints(journal, lambda: flushes.append(1) or True)
    checkpoints.done(0, idle=True)
    passed = time.monotonic() + 0.25  # after the flush
    while time.monotonic() <= passed:  # the clock passes the default interval
        threading.Event().wait(0.01)
    checkpoints.done(1, idle=True)
    assert flushes == [1, 1]
