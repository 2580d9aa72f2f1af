"""The durable queue of the trace and logs services: each accepted request on disk before OK.

With ``collector.durable`` on, a signal service writes every request it accepts to its
journal (``<durable directory>/signals/<signal>/``, :class:`exporters.journal.Journal`
records holding the request's wire bytes) and syncs it before the consumers get it and the
sender gets OK. The journal is acknowledged as the consumers hold what they were given:
after a ``flush()`` of every consumer that has one (every 64 requests, or when requests
pause), and for everything at a clean shutdown. A new collector hands what was not
acknowledged to the consumers, in order, before it takes any request: after a crash a
consumer sees every accepted request at least once, and :func:`replaying` tells it which
requests are an earlier process's (the samples consumer places those by their order).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path

from exporters.journal import Checkpoints, Journal

__all__ = ["SignalJournal", "replaying", "request_journal"]

logger = logging.getLogger(__name__)

DIRECTORY = "signals"
"""The signal journals' directory under the durable state directory."""
_REPLAYING: ContextVar[bool] = ContextVar("rltel_signal_replay", default=False)


def replaying() -> bool:
    """Whether the calling consumer is handed a request of an earlier process (a replay)."""
    return _REPLAYING.get()


def request_journal(directory: str | Path, limit_bytes: int, fsync: bool = True) -> Journal:
    """A journal whose records are raw request bytes (``pending``: ``(seq, bytes)``)."""
    return Journal(directory, limit_bytes, fsync, encode=bytes, decode=bytes)


class SignalJournal:
    """One signal service's journal and its acknowledgements.

    Args:
        state_dir: the durable state directory (held by the collector's ``DurableState``).
        signal: ``traces`` or ``logs``.
        limit_bytes: the journal's bound; past it requests are refused (retryable).
        fsync: fsync once per accepted request.
        flush: flushes the consumers; True when they hold everything given so far.

    Raises:
        OSError: the directory cannot be created or read.
    """

    def __init__(
        self,
        state_dir: str | Path,
        signal: str,
        limit_bytes: int,
        fsync: bool,
        flush: Callable[[], bool],
    ) -> None:
        self.root = Path(state_dir) / DIRECTORY
        self.journal = request_journal(self.root / signal, limit_bytes, fsync)
        self._acks = Checkpoints(self.journal, flush)
        self._lock = threading.Lock()
        self._refused = 0  # requests refused in a row (full, or a write failed)

    def replay(self, consume: Callable[[bytes], None]) -> int:
        """Hand every request an earlier process left unacknowledged to ``consume``, in
        order; how many there were."""
        pending, self.journal.pending = self.journal.pending, []
        token = _REPLAYING.set(True)
        try:
            with self._lock:
                for seq, data in pending:
                    consume(data)
                    self._acks.done(seq, idle=False)
                self._acks.checkpoint()
        finally:
            _REPLAYING.reset(token)
        return len(pending)

    def accept(self, data: bytes, consume: Callable[[], None]) -> None:
        """Journal ``data`` durably, then run ``consume``; one request at a time, so the
        journal's order is the consumers' order.

        Raises:
            OSError: the journal is full or cannot be written (nothing was consumed).
        """
        with self._lock:
            try:
                if self.journal.full:
                    raise OSError(
                        f"durable queue {self.journal.directory} is full "
                        f"({self.journal.limit_bytes} bytes): retry later"
                    )
                seq = self.journal.append(data)
                self.journal.sync()  # raises the append's error too
            except OSError as exc:
                self._refused += 1
                if self._refused == 1:
                    logger.error(
                        "durable queue %s: %s; refusing requests until it takes them again",
                        self.journal.directory,
                        exc,
                    )
                raise
            if self._refused:
                logger.warning(
                    "durable queue %s takes requests again after %d refused",
                    self.journal.directory,
                    self._refused,
                )
                self._refused = 0
            assert seq is not None
            consume()
            self._acks.done(seq, idle=True)

    def close(self, flushed: bool) -> None:
        """Acknowledge everything when the consumers hold it (``flushed``), close the
        journal, and remove the signal journals' directory once it holds no record."""
        with self._lock:
            if flushed:
                self._acks.final()
            self.journal.close()
        if not any(self.root.rglob("*.seg")):
            with contextlib.suppress(OSError):
                shutil.rmtree(self.root)
