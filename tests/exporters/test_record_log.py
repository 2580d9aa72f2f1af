"""The record log: records back in order in the next process, torn tails and CRC failures
skipped and counted, acknowledgement across segments, the byte bound, failed writes cut."""

from __future__ import annotations

import logging
import os

import pytest

from exporters.record_log import HEADER, RecordLog


def payloads(directory, **kwargs) -> list[tuple[int, bytes]]:
    """What a new process opening ``directory`` finds: ``(seq, payload)``, oldest first."""
    return [
        (record.seq, payload) for record, payload in RecordLog(directory, 1 << 30, **kwargs).held()
    ]


def segments(directory) -> list[str]:
    return sorted(path.name for path in directory.glob("*.seg"))


def log_of(directory, limit_bytes: int = 1 << 30, segment_bytes: int | None = None) -> RecordLog:
    return RecordLog(directory, limit_bytes, fsync=False, segment_bytes=segment_bytes)


def half_then_full(real_write):
    """An ``os.write`` that writes half of a record, then fails as a full disk does."""

    def write(fd, data):
        if len(data) > 4:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    return write


def test_records_come_back_in_order_and_numbering_goes_on_in_the_next_process(tmp_path):
    log = log_of(tmp_path)
    records = [log.append(payload) for payload in (b"a", b"bb", b"")]
    assert [record.seq for record in records] == [0, 1, 2] and log.last_seq == 2
    assert [log.read(record) for record in records] == [b"a", b"bb", b""]
    again = log_of(tmp_path)
    assert payloads(tmp_path) == [(0, b"a"), (1, b"bb"), (2, b"")]
    assert (len(again), again.held_bytes, again.unreadable) == (3, 3 * HEADER.size + 3, 0)
    assert again.append(b"c").seq == 3
    assert segments(tmp_path) == ["0000000000000000.seg", "0000000000000003.seg"]


def test_a_torn_tail_is_skipped_counted_and_never_appended_to(tmp_path):
    log = log_of(tmp_path)
    for payload in (b"aaaa", b"bbbb", b"cccc"):
        log.append(payload)
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes()[:-3])  # the last write cut by a kill
    again = log_of(tmp_path)
    assert [payload for _, payload in again.held()] == [b"aaaa", b"bbbb"]
    assert again.unreadable == 1
    assert again.append(b"dddd").seq == 2  # the torn record's number: it was never read
    assert segments(tmp_path) == ["0000000000000000.seg", "0000000000000002.seg"]
    assert payloads(tmp_path) == [(0, b"aaaa"), (1, b"bbbb"), (2, b"dddd")]


def test_a_record_failing_its_crc_is_skipped_and_the_records_after_it_read(tmp_path):
    log = log_of(tmp_path)
    for payload in (b"aaaa", b"bbbb", b"cccc"):
        log.append(payload)
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes().replace(b"bbbb", b"bbbx"))
    again = log_of(tmp_path)
    assert [payload for _, payload in again.held()] == [b"aaaa", b"cccc"]
    assert again.unreadable == 1


def test_a_record_changed_after_it_was_written_fails_its_read(tmp_path):
    log = log_of(tmp_path)
    first, second = log.append(b"aaaa"), log.append(b"bbbb")
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes().replace(b"aaaa", b"aaab"))
    with pytest.raises(ValueError, match="record 0 .* fails its CRC"):
        log.read(first)
    assert log.read(first, 3) == b"aaa"  # a head is not checked: the CRC covers all of it
    assert log.read(second) == b"bbbb"
    segment.write_bytes(segment.read_bytes()[:-1])
    with pytest.raises(ValueError, match="record 1 .* cut short"):
        log.read(second)
    segment.unlink()
    with pytest.raises(OSError):
        log.read(first)


def test_an_ack_removes_the_segments_wholly_before_it_and_the_next_process_skips_it(tmp_path):
    record = HEADER.size + 1
    log = log_of(tmp_path, segment_bytes=2 * record)  # two records a segment
    for payload in b"abcdefg":
        log.append(bytes([payload]))
    assert len(segments(tmp_path)) == 4 and log.bytes == 7 * record
    log.ack(2)  # record 3 keeps the second segment
    assert segments(tmp_path) == [f"{seq:016d}.seg" for seq in (2, 4, 6)]
    assert (len(log), log.held_bytes, log.bytes) == (4, 4 * record, 5 * record)
    assert payloads(tmp_path) == [(seq, bytes([b"abcdefg"[seq]])) for seq in range(3, 7)]
    log.ack(6)  # every record: the open segment stays until it is closed
    assert segments(tmp_path) == ["0000000000000006.seg"] and log.held_bytes == 0
    log.close()
    assert segments(tmp_path) == [] and log.bytes == 0
    assert log.append(b"h").seq == 7  # a new segment after the close
    assert payloads(tmp_path) == [(7, b"h")]


def test_a_fully_acked_segment_left_by_a_killed_process_goes_at_the_next_open(tmp_path):
    log = log_of(tmp_path)
    log.append(b"a")
    log.ack(0)  # the open segment stays; the process is killed
    assert len(segments(tmp_path)) == 1
    again = log_of(tmp_path)
    assert segments(tmp_path) == [] and len(again) == 0 and again.last_seq == 0


def test_full_at_the_limit_and_a_record_fits_exactly_up_to_it(tmp_path):
    record = HEADER.size + 4
    log = log_of(tmp_path, limit_bytes=2 * record)
    assert log.fits(4) and not log.fits(2 * record - HEADER.size + 1)
    log.append(b"aaaa")
    assert not log.full
    assert log.fits(4) and not log.fits(5)  # exactly at the limit; one byte over
    assert not log.fits(4, besides=1)  # bytes held elsewhere count against the bound
    log.append(b"bbbb")
    assert log.full
    assert log_of(tmp_path, limit_bytes=2 * record).full  # and in the next process
    log.ack(0)
    assert not log.full and log.fits(4)


def test_a_failed_write_is_cut_off_and_uses_up_its_number(tmp_path, monkeypatch):
    log = log_of(tmp_path)
    log.append(b"aaaa")
    monkeypatch.setattr(os, "write", half_then_full(os.write))
    with pytest.raises(OSError, match="No space"):
        log.append(b"b" * 64)
    monkeypatch.undo()
    assert (len(log), log.bytes) == (1, HEADER.size + 4)  # the half written is gone
    assert log.append(b"cccc").seq == 2
    again = log_of(tmp_path)
    assert [(r.seq, p) for r, p in again.held()] == [(0, b"aaaa"), (2, b"cccc")]
    assert again.unreadable == 0


def test_a_segment_removed_from_under_the_log_is_not_written_to(tmp_path):
    log = log_of(tmp_path / "log")
    log.append(b"a")
    (segment,) = (tmp_path / "log").glob("*.seg")
    segment.unlink()  # a cleanup removed it; a write there would be lost
    assert log.append(b"b").seq == 1
    assert payloads(tmp_path / "log") == [(1, b"b")]
    for path in (tmp_path / "log").iterdir():
        path.unlink()
    (tmp_path / "log").rmdir()
    with pytest.raises(OSError):
        log.append(b"c")


def test_an_ack_that_cannot_be_recorded_is_logged_once_until_one_is(tmp_path, caplog):
    log = log_of(tmp_path)
    for payload in (b"a", b"b", b"c"):
        log.append(payload)
    (tmp_path / "acked").mkdir()  # the ack's file cannot be written
    with caplog.at_level(logging.WARNING, logger="exporters.record_log"):
        log.ack(0)
        log.ack(1)
        assert [r.getMessage() for r in caplog.records] == [
            f"log {tmp_path}: cannot record ack 0: [Errno 21] Is a directory: "
            f"'{tmp_path / 'acked'}'"
        ]
        assert payloads(tmp_path) == [(0, b"a"), (1, b"b"), (2, b"c")]  # replayed again
        (tmp_path / "acked").rmdir()
        log.ack(1)  # acked already in this process: nothing to write
        log.ack(2)
        assert len(caplog.records) == 1
    assert payloads(tmp_path) == []


def test_acks_overwrite_one_fixed_width_line_in_place(tmp_path):
    (tmp_path / "acked").write_text("1")  # as an earlier version wrote it: no padding
    log = log_of(tmp_path)
    for payload in b"abcdefghijkl":
        log.append(bytes([payload]))
    assert [record.seq for record, _ in log.held()] == list(range(2, 14))
    for seq in range(2, 14):
        log.ack(seq)
        assert (tmp_path / "acked").read_text() == f"{seq:>20}\n"
    (tmp_path / "acked").unlink()  # removed from under the log: written anew
    assert log.append(b"m").seq == 14
    log.ack(14)
    assert (tmp_path / "acked").read_text() == f"{14:>20}\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["0000000000000002.seg", "acked"]
    log.close()
    assert log_of(tmp_path).last_seq == 14 and payloads(tmp_path) == []


def test_fsync_once_per_dirty_sync_and_for_a_new_segment_name(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    log = RecordLog(tmp_path, 1 << 20, fsync=True)
    log.sync()  # clean
    log.append(b"a")
    assert len(synced) == 1  # the directory, for the new segment's name
    log.sync()
    log.sync()
    assert len(synced) == 2
    quiet = RecordLog(tmp_path / "quiet", 1 << 20, fsync=False)
    quiet.append(b"a")
    quiet.sync()
    quiet.close()
    assert len(synced) == 2


def test_an_older_ack_changes_nothing_and_a_repeated_one_writes_nothing(tmp_path, caplog):
    log = log_of(tmp_path)
    for payload in b"abcdef":
        log.append(bytes([payload]))
    log.ack(4)
    log.ack(2)  # older: the log stays acknowledged up to 4
    assert (tmp_path / "acked").read_text() == f"{4:>20}\n"
    assert payloads(tmp_path) == [(5, b"f")]
    (tmp_path / "acked").unlink()
    (tmp_path / "acked").mkdir()  # a write of the ack would fail now, and be logged
    with caplog.at_level(logging.WARNING, logger="exporters.record_log"):
        log.ack(4)  # acknowledged already: nothing is written
        log.ack(3)
    assert caplog.records == []


def test_an_ack_failing_again_after_one_was_recorded_is_logged_again(tmp_path, caplog):
    log = log_of(tmp_path)
    for payload in b"abcd":
        log.append(bytes([payload]))
    (tmp_path / "acked").mkdir()
    with caplog.at_level(logging.WARNING, logger="exporters.record_log"):
        log.ack(0)
        (tmp_path / "acked").rmdir()
        log.ack(1)  # recorded: the run of failures ends
        (tmp_path / "acked").unlink()
        (tmp_path / "acked").mkdir()
        log.ack(2)
    assert [r.getMessage().split(":")[1] for r in caplog.records] == [
        " cannot record ack 0",
        " cannot record ack 2",
    ]


def test_the_acked_file_is_readable_by_all_and_writable_by_its_owner(tmp_path):
    log = log_of(tmp_path)
    log.append(b"a")
    log.ack(0)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "acked").st_mode & 0o777 == 0o644 & ~umask


def test_fsync_is_the_default(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    log = RecordLog(tmp_path, 1 << 20)
    log.append(b"a")
    synced.clear()  # the new segment's directory entry
    log.sync()
    assert len(synced) == 1


def test_a_torn_write_whose_cut_fails_closes_the_segment(tmp_path, monkeypatch):
    log = log_of(tmp_path)
    log.append(b"aaaa")

    def cannot_cut(fd, size):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "write", half_then_full(os.write))
    monkeypatch.setattr(os, "ftruncate", cannot_cut)
    with pytest.raises(OSError, match="No space"):
        log.append(b"b" * 64)
    monkeypatch.undo()
    assert log.append(b"cccc").seq == 2  # in a new segment: the torn bytes end the old one
    assert len(segments(tmp_path)) == 2
    again = log_of(tmp_path)
    assert [(r.seq, p) for r, p in again.held()] == [(0, b"aaaa"), (2, b"cccc")]
    assert again.unreadable == 1  # the torn tail, skipped


def test_acks_across_hundreds_of_segments_keep_the_open_one(tmp_path):
    """Segment indices past 256 (ints that are not cached objects) compare by value."""
    log = log_of(tmp_path, segment_bytes=1)  # one record a segment
    for seq in range(300):
        log.append(seq.to_bytes(2, "big"))
    log.ack(299)  # every record, in 300 segments
    assert segments(tmp_path) == [f"{299:016d}.seg"]  # the open segment stays
    assert log.append(b"x").seq == 300
    assert payloads(tmp_path) == [(300, b"x")]
