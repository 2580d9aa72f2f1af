"""The remote-write backlog a clean shutdown keeps on disk while the receiver is down.

With the collector's durable queue, a shutdown during a receiver outage writes what is left
(the encoded writes, in order, with their samples' original timestamps) and each series'
last timestamp to ``<sink's journal directory>/backlog.kept``; the next process sends those
writes first and stamps its own samples after them, so the receiver sees every series in
timestamp order across the restart. The file is written to a temporary name, fsynced and
renamed (a crash leaves the old file or the new one, never half of one); a CRC-32 guards it.

Layout: ``RLRWKEPT1``, then frames of ``<I`` length + bytes: a JSON header
``{"crc": ..., "writes": [[samples, newest_ms], ...], "last": [[labels, ts_ms], ...]}``, then
one frame per write's payload.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from pathlib import Path

__all__ = ["FILE", "Contents", "KeptBacklog", "load", "save"]

logger = logging.getLogger("exporters.remote_write")

FILE = "backlog.kept"
"""The kept backlog's file name in the sink's journal directory (``*.kept``: the durable
state directory is kept while one exists)."""
_MAGIC = b"RLRWKEPT1"
_LEN = struct.Struct("<I")

Labels = tuple[tuple[str, str], ...]
Contents = tuple[list[tuple[bytes, int, int]], dict[Labels, int]]
"""What the file holds: ``([(payload, samples, newest_ms), ...], {series labels: last
timestamp ms})``."""


def save(path: Path, writes: list[tuple[bytes, int, int]], last: dict[Labels, int]) -> None:
    """Write ``writes`` and ``last`` to ``path`` atomically.

    Raises:
        OSError: the file could not be written.
    """
    body = b"".join(_LEN.pack(len(payload)) + payload for payload, _, _ in writes)
    header = {
        "crc": zlib.crc32(body),
        "writes": [[samples, newest_ms] for _, samples, newest_ms in writes],
        "last": [[list(map(list, labels)), ts] for labels, ts in last.items()],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        out.write(_MAGIC + _LEN.pack(len(head)) + head + body)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path: Path) -> Contents:
    """What :func:`save` wrote to ``path``; nothing when there is no file.

    Raises:
        ValueError: the file is not a kept backlog, or is damaged.
        OSError: the file exists and cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], {}
    if not data.startswith(_MAGIC):
        raise ValueError(f"{path}: not a kept remote-write backlog")
    try:
        return _parse(data[len(_MAGIC) :])
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ValueError(f"{path}: damaged: {exc}") from None


def _parse(data: bytes) -> Contents:
    (size,) = _LEN.unpack_from(data, 0)
    header = json.loads(data[_LEN.size : _LEN.size + size])
    body = data[_LEN.size + size :]
    if zlib.crc32(body) != header["crc"]:
        raise ValueError("CRC mismatch")
    writes, at = [], 0
    for samples, newest_ms in header["writes"]:
        (size,) = _LEN.unpack_from(body, at)
        writes.append((body[at + _LEN.size : at + _LEN.size + size], samples, newest_ms))
        at += _LEN.size + size
    last = {tuple(tuple(pair) for pair in labels): ts for labels, ts in header["last"]}
    return writes, last


class KeptBacklog:
    """One sink's kept backlog: taken up at start, removed once its last write left the
    backlog, written again at shutdown. Not thread-safe (the sink's lock guards it).

    Args:
        directory: the sink's journal directory.
    """

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILE
        self.unsent = 0  # writes taken up that have not left the backlog yet

    def take_up(self) -> Contents | None:
        """What an earlier process kept; None when the file is unreadable (logged and left
        there for a person to look at: this process keeps nothing then)."""
        try:
            writes, last = load(self.path)
        except (OSError, ValueError) as exc:
            logger.warning(
                "remote_write sink: kept backlog unreadable, left there; this process will "
                "not keep its backlog at shutdown: %s",
                exc,
            )
            return None
        self.unsent = len(writes)
        if writes:
            logger.info(
                "remote_write sink: %d writes kept by the last process go first", len(writes)
            )
        return writes, last

    def gone(self, n: int) -> None:
        """``n`` taken-up writes left the backlog (sent or dropped)."""
        if n:
            self.unsent -= n
            if self.unsent <= 0:
                self.path.unlink(missing_ok=True)

    def keep(self, writes: list[tuple[bytes, int, int]], last: dict[Labels, int]) -> None:
        """Keep ``writes`` for the next start (remove the file when there are none).

        Raises:
            OSError: the file could not be written.
        """
        if not writes:
            self.path.unlink(missing_ok=True)
            return
        save(self.path, writes, last)
        samples = sum(n for _, n, _ in writes)
        logger.warning(
            "remote_write sink: %d samples undelivered at shutdown kept in %s for the next start",
            samples,
            self.path,
        )
