"""The durable queue never acknowledges a journal past a failed sink flush.

The remote-write sink's flush fails for a real reason: its receiver is down (nothing listens
on the port), so the writes it holds are not delivered. Its queue, journaled as the
collector journals it, exports every step and flushes after the first (the flush fails);
the process then dies without a clean shutdown. The next process's queue on the same
journal, its receiver up, delivers every step once, at its commit time.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from exporters.journal import Journal
from exporters.queued import QueuedSink
from telemetry.model.snapshot import Gauge, Snapshot, Step
from tests.distributed import free_port
from tests.exporters.test_remote_write import RESOURCE, Receiver, _delivered, _samples, _sink

STEPS = 5


def _step(step: int, t0_ms: int) -> Snapshot:
    time_ns = (t0_ms + 1000 * step) * 1_000_000
    return Snapshot((Gauge("loss", float(step)),), Step(0, step, step), RESOURCE, time_ns)


def _until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        threading.Event().wait(0.02)


def test_a_failed_flush_leaves_the_journal_unacknowledged_for_the_next_process(
    tmp_path: Path,
) -> None:
    t0 = int(time.time() * 1000) - 60_000  # commit times within the accepted age
    directory = tmp_path / "remote_write"
    down = _sink(f"http://127.0.0.1:{free_port()}/api/v1/write")
    first = QueuedSink(down, queue_size=10)
    first.journal_to(Journal(directory, 1 << 20, fsync=False))
    for step in range(1, STEPS + 1):
        assert first.submit(_step(step, t0))
    # Every export done (each journaled step's samples wait in the sink), so the queue's
    # checkpoint after the first has run and its flush failed: nothing is delivered.
    _until(lambda: first.depth() == 0 and down.pending_samples >= STEPS)
    assert not down.force_flush(0.1)
    # The process dies: its queue and its sink are never shut down (a clean shutdown would
    # keep the samples in backlog.kept, which a SIGKILL never writes, and then a checkpoint
    # still in flight would find nothing pending and acknowledge). Their threads go on
    # failing against the dead port until the test ends: nothing more is acknowledged.

    left = Journal(directory, 1 << 20, fsync=False).pending
    assert [s.step.global_step for _, s in left] == list(range(1, STEPS + 1))

    up = Receiver([204])
    sink = _sink(up.url)
    second = QueuedSink(sink, queue_size=10)
    try:
        second.journal_to(Journal(directory, 1 << 20, fsync=False))  # replayed first
        _until(lambda: second.depth() == 0 and _delivered(sink, 1.0))
    finally:
        second.shutdown(10)
        up.close()
    loss = [(value, ts) for labels, value, ts in _samples(up) if labels["__name__"] == "loss"]
    assert loss == [(float(step), t0 + 1000 * step) for step in range(1, STEPS + 1)]
    assert Journal(directory, 1 << 20, fsync=False).pending == []  # held, then acknowledged
    down.shutdown(0.1)
