"""FanOut admission and bookkeeping: reservations all-or-none, slots used once and given back,
every sink's refusal reported, names made unique, flush and shutdown within one deadline.

Deterministic: a gated sink holds its first export until the test opens the gate, so what
is queued is known exactly (no sleeps; timeouts are far beyond any wait here).
"""

from __future__ import annotations

import inspect
import threading
import time

from exporters.base import Delivery, ExportResult, InMemorySink, Sink
from exporters.fanout import FanOut
from telemetry.model.snapshot import Snapshot
from tests.exporters.test_queued import snap

WAIT_S = 30.0  # never reached unless the code under test hangs


class Gated(Sink):
    """Holds its exports until ``gate`` opens; records every snapshot. Its own queue policy
    (a :class:`Delivery`) sets its queue size."""

    name = "gated"

    def __init__(self, queue_size: int | None = 4) -> None:
        if queue_size is not None:  # else the fan-out's defaults
            self.delivery = Delivery(queue_size, timeout_s=WAIT_S)
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.snapshots: list[Snapshot] = []

    def export(self, snapshot, timeout_s=10.0):
        self.entered.set()
        self.gate.wait(WAIT_S)
        self.snapshots.append(snapshot)
        return ExportResult.SUCCESS


def busy_fan(*queue_sizes: int) -> tuple[FanOut, list[Gated]]:
    """A fan-out of gated sinks whose workers each hold one snapshot in an export call."""
    sinks = [Gated(size) for size in queue_sizes]
    fan = FanOut(sinks)
    assert fan.export(snap(0))
    for sink in sinks:
        assert sink.entered.wait(WAIT_S)  # the worker took step 0: every queue is empty
    return fan, sinks


def finish(fan: FanOut, sinks: list[Gated]) -> None:
    for sink in sinks:
        sink.gate.set()
    assert fan.force_flush(timeout_s=WAIT_S)
    fan.shutdown(timeout_s=WAIT_S)


def test_a_reservation_takes_slots_in_every_sink_or_in_none():
    fan, sinks = busy_fan(8, 4)
    first = fan.reserve(3)
    assert first is not None
    assert fan.reserve(3) is None  # the second sink has 1 slot left: nothing taken anywhere
    roomy = fan.queued[0]
    assert roomy.reserve(5) == 5  # 3 + 5 = 8: the refused request left no slot taken here
    roomy.release(5)
    first.release()
    finish(fan, sinks)


def test_reserved_slots_are_filled_once_each_and_the_rest_given_back():
    fan, sinks = busy_fan(4)
    queued = fan.queued[0]
    mine = fan.reserve(2)
    other = fan.reserve(2)
    assert mine is not None and other is not None and fan.reserve(1) is None  # 4 of 4 promised
    assert fan.export(snap(1), reservation=mine)
    assert fan.export(snap(2), reservation=mine)
    # mine is used up: a third snapshot needs a free slot, and the other request holds them
    assert not fan.export(snap(3), reservation=mine)
    assert fan.stats()["gated"].dropped == 1
    assert fan.export(snap(4), reservation=other) and fan.export(snap(5), reservation=other)
    other.release()
    mine.release()
    mine.release()  # twice: nothing more to give back
    assert queued.depth() == 4
    finish(fan, sinks)
    assert [s.step.global_step for s in sinks[0].snapshots] == [0, 1, 2, 4, 5]


def test_released_slots_are_free_again_and_a_released_reservation_fills_none():
    fan, sinks = busy_fan(4)
    queued = fan.queued[0]
    mine = fan.reserve(3)
    assert fan.export(snap(1), reservation=mine)  # 1 slot filled, 2 still promised
    assert queued.reserve(2) is None  # 1 queued + 2 promised + 2 > 4
    mine.release()
    assert queued.reserve(3) == 3  # the 2 unfilled slots came back
    queued.release(3)
    other = fan.reserve(1)
    assert fan.export(snap(2), reservation=mine)  # released: an ordinary submit, room left
    assert queued.reserve(2) is None  # 2 queued + 1 still promised to `other` + 2 > 4
    assert fan.export(snap(3), reservation=other)
    finish(fan, sinks)


def test_export_is_true_only_when_every_sink_took_the_snapshot():
    fan, sinks = busy_fan(4, 1)
    assert fan.export(snap(1))  # room in both
    assert not fan.export(snap(2))  # the second sink's one slot is taken: refused there
    stats = fan.stats()
    assert (stats["gated"].dropped, stats["gated#2"].dropped) == (0, 1)
    finish(fan, sinks)
    assert [len(s.snapshots) for s in sinks] == [3, 2]


def test_repeated_names_are_numbered_in_order():
    fan = FanOut([InMemorySink(), InMemorySink(), InMemorySink(), Gated()])
    assert list(fan.stats()) == ["memory", "memory#2", "memory#3", "gated"]
    fan.shutdown(timeout_s=WAIT_S)


def test_force_flush_waits_for_every_sink_within_its_deadline():
    fan, sinks = busy_fan(4, 4)
    assert fan.export(snap(1))
    threading.Timer(0.2, sinks[1].gate.set).start()  # the slow one opens a little later
    sinks[0].gate.set()
    assert fan.force_flush(timeout_s=WAIT_S) is True
    assert [len(s.snapshots) for s in sinks] == [2, 2]
    fan.shutdown(timeout_s=WAIT_S)
    assert fan.force_flush(timeout_s=WAIT_S) is False  # closed: nothing can flush


def test_the_last_unfilled_slot_is_given_back_too():
    fan, sinks = busy_fan(4)
    queued = fan.queued[0]
    mine = fan.reserve(2)
    assert fan.export(snap(1), reservation=mine)  # 1 slot of 2 left unfilled
    mine.release()
    assert queued.reserve(3) == 3  # 1 queued + 3 = 4: the unfilled slot came back
    queued.release(3)
    finish(fan, sinks)


def test_defaults_are_1024_snapshots_per_sink_and_10_s_per_call():
    fan, sinks = busy_fan(None)
    accepted = [fan.export(snap(step)) for step in range(1, 1026)]
    assert accepted == [True] * 1024 + [False]
    assert fan.queued[0].policy.timeout_s == 10.0
    finish(fan, sinks)
    for method in (FanOut.force_flush, FanOut.shutdown):  # one budget of 10 s for all sinks
        assert inspect.signature(method).parameters["timeout_s"].default == 10.0


def stuck_fan(n: int) -> tuple[FanOut, list[Gated], threading.Timer]:
    """``n`` sinks each stuck in an export call, freed after 8 s at the latest."""
    fan, sinks = busy_fan(*([4] * n))
    for step in (1, 2):
        assert fan.export(snap(step))
    opener = threading.Timer(8.0, lambda: [sink.gate.set() for sink in sinks])
    opener.start()
    return fan, sinks, opener


def free(sinks: list[Gated], opener: threading.Timer) -> None:
    opener.cancel()
    for sink in sinks:
        sink.gate.set()


def test_force_flush_gives_up_at_one_deadline_for_all_sinks():
    fan, sinks, opener = stuck_fan(3)
    start = time.monotonic()
    assert fan.force_flush(timeout_s=0.3) is False
    elapsed = time.monotonic() - start
    assert 0.3 <= elapsed < 2.0  # one 0.3 s deadline shared, not one per sink
    free(sinks, opener)
    fan.shutdown(timeout_s=WAIT_S)


def test_shutdown_ends_at_one_deadline_for_all_sinks():
    fan, sinks, opener = stuck_fan(3)
    start = time.monotonic()
    fan.shutdown(timeout_s=0.3)
    assert time.monotonic() - start < 2.0  # one 0.3 s deadline shared, not one per sink
    assert [fan.stats()[name].dropped for name in ("gated", "gated#2", "gated#3")] == [2, 2, 2]
    free(sinks, opener)


def test_shutdown_drains_what_is_queued_before_the_deadline():
    fan, sinks = busy_fan(4, 4)
    for step in (1, 2, 3):
        assert fan.export(snap(step))
    opener = threading.Timer(0.2, lambda: [sink.gate.set() for sink in sinks])
    opener.start()
    fan.shutdown(timeout_s=WAIT_S)  # the sinks answer after 0.2 s: everything is delivered
    assert [[s.step.global_step for s in sink.snapshots] for sink in sinks] == [[0, 1, 2, 3]] * 2


def test_shutdown_with_a_budget_over_a_second_still_ends_at_its_deadline():
    fan, sinks, opener = stuck_fan(2)
    start = time.monotonic()
    fan.shutdown(timeout_s=1.2)
    assert 1.2 <= time.monotonic() - start < 4.0  # the sinks stay stuck for 8 s
    free(sinks, opener)
