"""The bounded queue of a queued sink, on its own (exporters/bounded_queue.py)."""

from __future__ import annotations

from exporters.bounded_queue import BoundedQueue
from tests.exporters.test_queued import snap


def test_an_earlier_process_items_count_in_the_depth_whatever_the_size():
    queue = BoundedQueue(size=2)
    restored = [(snap(step), None, step) for step in range(3)]
    queue.restore(restored)
    assert queue.depth == 3  # restored beyond the bound
    assert not queue.offer(snap(9), None, reserved=False)  # full: they count as queued
    assert [queue.take() for _ in restored] == restored  # in order
    assert queue.depth == 0
    assert queue.offer(snap(9), None, reserved=False)
