"""The backlog a clean shutdown keeps for the next start (exporters.remote_write.kept_backlog): the
file round-trips, damage is named, and it goes once its last write left the backlog."""

from __future__ import annotations

import json
import logging

import pytest

from exporters.remote_write import kept_backlog
from exporters.remote_write.kept_backlog import KeptBacklog

WRITES = [(b"first", 2, 1_000), (b"", 1, 1_001), (b"third write", 3, 1_002)]
LAST = {(("__name__", "loss"), ("job", "t")): 1_002, (("__name__", "up"),): 999}


def test_save_and_load_round_trip_writes_in_order_and_last_timestamps(tmp_path):
    path = tmp_path / kept_backlog.FILE
    kept_backlog.save(path, WRITES, LAST)
    assert kept_backlog.load(path) == (WRITES, LAST)
    assert not path.with_suffix(".tmp").exists()
    assert kept_backlog.load(tmp_path / "none") == ([], {})


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda data: b"RLRWKEPT2" + data[9:], "not a kept remote-write backlog"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "CRC mismatch"),
        (lambda data: data[:12], "damaged"),
        (lambda data: data[:9] + b"\xff\x00\x00\x00{}", "damaged"),
        (lambda data: data[:9], "damaged"),
    ],
    ids=["magic", "payload", "cut-header", "header-not-json", "no-header"],
)
def test_a_damaged_file_is_a_value_error_naming_it(tmp_path, damage, why):
    path = tmp_path / kept_backlog.FILE
    kept_backlog.save(path, WRITES, LAST)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=why) as error:
        kept_backlog.load(path)
    assert str(path) in str(error.value)


def _rewrite_header(path, change) -> None:
    data = path.read_bytes()
    size = int.from_bytes(data[9:13], "little")
    header = json.loads(data[13 : 13 + size])
    change(header)
    head = json.dumps(header).encode()
    path.write_bytes(data[:9] + len(head).to_bytes(4, "little") + head + data[13 + size :])


def test_a_header_naming_more_writes_than_the_body_holds_is_damaged(tmp_path):
    path = tmp_path / kept_backlog.FILE
    kept_backlog.save(path, WRITES[:1], {})
    _rewrite_header(path, lambda header: header["writes"].append([1, 5]))
    with pytest.raises(ValueError, match="damaged"):
        kept_backlog.load(path)


@pytest.mark.parametrize("crc", [0, 0xFFFFFFFF])
def test_a_crc_above_or_below_the_bodys_is_a_mismatch(tmp_path, crc):
    path = tmp_path / kept_backlog.FILE
    kept_backlog.save(path, WRITES, LAST)
    _rewrite_header(path, lambda header: header.update(crc=crc))
    with pytest.raises(ValueError, match="CRC mismatch"):
        kept_backlog.load(path)


def test_taken_up_writes_are_counted_down_and_the_file_goes_with_the_last(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    kept_backlog.save(tmp_path / kept_backlog.FILE, WRITES, LAST)
    keep = KeptBacklog(tmp_path)
    assert keep.take_up() == (WRITES, LAST)
    assert "3 writes kept by the last process go first" in caplog.text
    keep.gone(0)
    keep.gone(2)
    assert keep.unsent == 1 and (tmp_path / kept_backlog.FILE).exists()
    keep.gone(1)
    assert keep.unsent == 0 and not (tmp_path / kept_backlog.FILE).exists()


def test_nothing_kept_is_nothing_taken_up_and_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="exporters.remote_write")
    keep = KeptBacklog(tmp_path)
    assert keep.take_up() == ([], {}) and keep.unsent == 0
    assert caplog.records == []


def test_an_unreadable_file_is_left_there_and_nothing_taken_up(tmp_path, caplog):
    (tmp_path / kept_backlog.FILE).write_bytes(b"garbage")
    (tmp_path / "dir.kept").mkdir()
    assert KeptBacklog(tmp_path).take_up() is None
    assert "kept backlog unreadable, left there" in caplog.text
    assert (tmp_path / kept_backlog.FILE).read_bytes() == b"garbage"
    keep = KeptBacklog(tmp_path)
    keep.path = tmp_path / "dir.kept"  # exists, cannot be read: an OSError
    assert keep.take_up() is None


def test_keep_writes_the_backlog_or_removes_the_file_when_there_is_none(tmp_path, caplog):
    keep = KeptBacklog(tmp_path)
    keep.keep(WRITES, LAST)
    assert kept_backlog.load(tmp_path / kept_backlog.FILE) == (WRITES, LAST)
    assert "6 samples undelivered at shutdown kept in" in caplog.text
    keep.keep([], LAST)
    assert not (tmp_path / kept_backlog.FILE).exists()
    keep.keep([], LAST)  # no file: nothing to remove


def test_a_file_removed_meanwhile_is_not_an_error_once_its_writes_left(tmp_path):
    kept_backlog.save(tmp_path / kept_backlog.FILE, WRITES, LAST)
    keep = KeptBacklog(tmp_path)
    keep.take_up()
    (tmp_path / kept_backlog.FILE).unlink()  # a person removed it while its writes were queued
    keep.gone(3)
    assert keep.unsent == 0
