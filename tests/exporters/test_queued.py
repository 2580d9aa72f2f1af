"""The delivery model's parts, deterministic (events, no timing asserts): MemoryCharge,
TimedCaller, and QueuedSink's bookkeeping behind a gated sink."""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import threading
import time

import pytest

from exporters.base import Delivery, ExportResult, Sink
from exporters.journal import Journal
from exporters.memory_charge import MemoryCharge
from exporters.queued import QueuedSink
from exporters.timed_call import Stalled, TimedCaller
from telemetry.model.snapshot import Gauge, Snapshot, Step
from tests.exporters.overflows import ListOverflow


def test_charge_releases_its_bytes_once_when_the_last_hold_is_done():
    released: list[int] = []
    charge = MemoryCharge(123, released.append)
    charge.hold()
    charge.hold()
    assert charge.nbytes == 123
    charge.done()
    charge.done()
    assert released == []
    charge.done()
    assert released == [123]


def test_charge_without_extra_holds_releases_on_the_first_done():
    released: list[int] = []
    charge = MemoryCharge(7, released.append)
    charge.done()
    assert released == [7]
    charge.done()  # one done too many: released once, never again
    assert released == [7]


def test_charge_holds_from_many_threads_are_counted_exactly():
    released: list[int] = []
    charge = MemoryCharge(5, released.append)
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        for _ in range(2000):
            charge.hold()
        for _ in range(2000):
            charge.done()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert released == []
    charge.done()
    assert released == [5]


def test_timed_caller_returns_the_value_on_a_named_daemon_thread():
    caller = TimedCaller("sinkname")
    seen: list[threading.Thread] = []

    def fn() -> int:
        seen.append(threading.current_thread())
        return 42

    assert caller.call(fn, 5.0) == 42
    assert seen[0] is not threading.current_thread()
    assert seen[0].name == "sinkname-call"
    assert seen[0].daemon
    assert not caller.stalled


@pytest.mark.parametrize("error", [ValueError("v"), KeyboardInterrupt(), SystemExit(2)])
def test_timed_caller_reraises_what_the_call_raised(error):
    caller = TimedCaller("s")

    def fn() -> None:
        raise error

    with pytest.raises(type(error)) as info:
        caller.call(fn, 5.0)
    assert info.value is error
    assert not caller.stalled


def test_timed_caller_returns_none_from_a_call_returning_none():
    assert TimedCaller("s").call(lambda: None, 5.0) is None


def test_a_stalled_call_is_abandoned_busy_while_it_runs_then_the_caller_is_free():
    caller = TimedCaller("s")
    entered = threading.Event()
    release = threading.Event()
    calls: list[str] = []

    def hung() -> str:
        calls.append("hung")
        entered.set()
        release.wait(30)
        return "late"

    assert not caller.stalled
    caller.join_stalled(0.0)  # nothing abandoned yet: returns at once
    with pytest.raises(Stalled) as stalled:
        caller.call(hung, 0.05)
    assert not stalled.value.earlier  # this call's own stall: it was made
    assert entered.is_set()
    assert caller.stalled
    with pytest.raises(Stalled) as busy:
        caller.call(lambda: calls.append("second"), 5.0)
    assert busy.value.earlier
    assert calls == ["hung"]  # the second call never entered the sink
    start = time.monotonic()
    caller.join_stalled(0.01)  # still running: only waits that long
    assert caller.stalled and time.monotonic() - start < 0.9
    release.set()
    caller.join_stalled(30.0)
    assert not caller.stalled
    assert caller.call(lambda: "next", 5.0) == "next"
    assert calls == ["hung"]


def test_join_stalled_with_a_negative_budget_returns_while_the_call_runs():
    caller = TimedCaller("s")
    release = threading.Event()
    with pytest.raises(Stalled):
        caller.call(lambda: release.wait(30), 0.01)
    start = time.monotonic()
    caller.join_stalled(-5.0)
    assert caller.stalled and time.monotonic() - start < 0.9
    release.set()
    caller.join_stalled(30.0)
    assert not caller.stalled


# -- QueuedSink behind a gated sink ---------------------------------------------------

WAIT_S = 30.0  # never reached unless the code under test hangs


def snap(step: int) -> Snapshot:
    return Snapshot(points=(Gauge("loss", float(step)),), step=Step(0, step, step))


class Gated(Sink):
    """Holds every export until ``gate`` opens (``entered`` says one is held); records the
    snapshots, what was discarded and the shutdown budget; answers ``results`` in order,
    then SUCCESS; ``flushed`` is what force_flush answers."""

    name = "gated"
    overflow = None

    def __init__(self, results: list[ExportResult] | None = None) -> None:
        self.entered = threading.Event()
        self.returned = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.results = list(results or [])
        self.snapshots: list[Snapshot] = []
        self.discarded: list[Snapshot] = []
        self.shutdowns: list[float] = []
        self.flushed = True
        self.depth = None
        self.pushback: float | None = None
        self.calls: list[float] = []
        self.events: list[str] = []

    def export(self, snapshot, timeout_s=10.0):
        self.calls.append(time.monotonic())
        self.entered.set()
        self.gate.wait(WAIT_S)
        self.returned.set()
        if self.results:
            return self.results.pop(0)
        self.snapshots.append(snapshot)
        return ExportResult.SUCCESS

    def force_flush(self, timeout_s=10.0):
        return self.flushed

    def shutdown(self, timeout_s=10.0):
        self.shutdowns.append(timeout_s)
        self.events.append("shutdown")

    def attach(self, depth):
        self.depth = depth

    def discard(self, snapshot):
        self.discarded.append(snapshot)
        self.events.append(f"discard {snapshot.step.global_step}")

    def retry_after(self):
        return self.pushback


def held(queue_size: int, sink: Gated | None = None) -> tuple[QueuedSink, Gated]:
    """A queued gated sink whose worker holds step 0 in an export call: the queue is empty."""
    sink = sink or Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, queue_size=queue_size, timeout_s=WAIT_S)
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    return queued, sink


def test_of_takes_the_sinks_delivery_policy_else_the_given_size_and_timeout():
    sink = Gated()
    sink.delivery = Delivery(7, 3.0, 5, 0.2, 0.4, True, 1.5)
    q = QueuedSink.of(sink, 100, 9.0, name="x")
    assert (q.policy, q.queue_size, q.name) == (sink.delivery, 7, "x")
    plain = QueuedSink.of(Gated(), 100, 9.0)
    assert (plain.policy, plain.name) == (Delivery(100, 9.0, 3, 0.05, 1.0, False, 2.0), "gated")
    default = QueuedSink.of(Gated())
    assert (default.policy.queue_size, default.policy.timeout_s) == (1024, 10.0)
    for s in (q, plain, default):
        s.shutdown(1.0)


def test_the_smallest_arguments():
    smallest = QueuedSink(Gated(), queue_size=1, timeout_s=1e-9, max_retries=0)
    assert (smallest.policy.queue_size, smallest.policy.max_retries) == (1, 0)
    smallest.shutdown(1.0)


def test_a_sink_that_declares_no_ability_runs_on_the_contracts_defaults():
    class Plain(Sink):
        def export(self, snapshot, timeout_s=10.0):
            return ExportResult.SUCCESS

    sink = Plain()
    plain = QueuedSink(sink)
    assert plain.name == "sink" and plain.overflow is None and sink.retry_after() is None
    assert plain.submit(snap(0)) and plain.force_flush(WAIT_S)
    plain.shutdown(WAIT_S)


def test_the_sink_reads_the_queue_depth_and_stats_count_every_outcome():
    queued, sink = held(3)
    workers = [t for t in threading.enumerate() if t.name == "rltel-sink-gated"]
    assert workers and all(t.daemon for t in workers)  # never keeps the interpreter alive
    assert sink.depth is not None and sink.depth() == 0
    assert queued.submit(snap(1)) and queued.submit(snap(2))
    assert sink.depth() == queued.depth() == 2
    stats = queued.stats()
    assert (stats.name, stats.queue_depth, stats.exported, stats.dropped) == ("gated", 2, 0, 0)
    assert stats.last_latency_s is None and not stats.degraded
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    stats = queued.stats()
    assert (stats.exported, stats.failed, stats.retried, stats.timed_out) == (3, 0, 0, 0)
    assert stats.queue_depth == 0 and stats.last_latency_s is not None
    queued.shutdown(WAIT_S)


def test_a_charge_is_held_while_queued_and_done_after_the_export():
    queued, sink = held(1)
    released: list[int] = []
    charge = MemoryCharge(10, released.append)
    assert queued.submit(snap(1), charge)
    refused_charge = MemoryCharge(20, released.append)
    assert not queued.submit(snap(2), refused_charge)  # full: not held
    refused_charge.done()
    assert released == [20]
    assert sink.discarded == [snap(2)]
    charge.done()  # the admitting caller's hold
    assert released == [20]
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert released == [20, 10]
    queued.shutdown(WAIT_S)


def test_reservations_count_against_the_queue_and_fill_reserved_slots():
    queued, sink = held(3)
    assert queued.reserve(2) == 2
    assert queued.reserve(2) is None  # 2 reserved + 2 > 3
    assert queued.reserve(1) == 1  # exactly full
    assert not queued.submit(snap(1))  # no free slot for an unreserved one
    assert queued.submit(snap(2), reserved=True)
    assert queued.depth() == 1
    queued.release(1)
    assert queued.reserve(2) is None  # 1 queued + 1 reserved + 2 > 3
    assert queued.reserve(1) == 1
    queued.release(10)  # never below none
    assert queued.submit(snap(3)) and queued.submit(snap(4))
    assert not queued.submit(snap(5), reserved=True)  # no reservation left: a full queue
    assert queued.stats().dropped == 2
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert [s.step.global_step for s in sink.snapshots] == [0, 2, 3, 4]
    queued.shutdown(WAIT_S)


def test_an_empty_queue_takes_one_request_of_any_size():
    queued, sink = held(3)
    assert queued.reserve(10) == 10
    assert not queued.submit(snap(9))  # 10 reserved of 3: no free slot
    queued.release(10)
    assert queued.submit(snap(1))
    assert queued.reserve(3) is None  # 1 + 3 > 3
    assert queued.reserve(2) == 2
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_a_closed_queue_reserves_nothing_refuses_reserved_slots_and_flushes():
    queued, sink = held(3)
    assert queued.reserve(1) == 1
    queued.close(WAIT_S)
    assert queued.reserve(1) is None
    assert queued.request_flush(1.0) is None
    assert queued.force_flush(1.0) is False
    assert not queued.submit(snap(1), reserved=True)
    assert queued.stats().dropped == 1 and sink.discarded == [snap(1)]
    sink.gate.set()
    queued.shutdown(WAIT_S)
    assert sink.shutdowns and queued.stats().exported == 1


def test_a_degraded_sink_reserves_nothing_and_takes_everything():
    sink = Gated([ExportResult.PERMANENT_FAILURE])
    queued = QueuedSink(sink, queue_size=2, timeout_s=WAIT_S)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    assert queued.stats().degraded and queued.stats().failed == 1
    assert queued.reserve(5) == 0
    queued.shutdown(WAIT_S)


def test_shutdown_drops_what_is_queued_answers_flushes_and_releases_charges():
    queued, sink = held(4)
    released: list[int] = []
    charges = [MemoryCharge(n, released.append) for n in (1, 2)]
    for step, charge in zip((1, 2), charges, strict=True):
        assert queued.submit(snap(step), charge)
        charge.done()
    marker = queued.request_flush(WAIT_S)
    assert marker is not None
    queued.shutdown(0.2)  # the worker stays in the held call: abandoned at the deadline
    assert marker.done.is_set() and marker.ok is False
    assert sorted(released) == [1, 2]
    assert sink.discarded == [snap(1), snap(2)]
    stats = queued.stats()
    assert (stats.dropped, stats.queue_depth, stats.exported) == (2, 0, 0)
    assert len(sink.shutdowns) == 1 and 0.05 <= sink.shutdowns[0] <= 0.2
    sink.gate.set()


def test_the_sink_shutdown_gets_the_budget_left():
    sink = Gated()
    queued = QueuedSink(sink, timeout_s=WAIT_S)
    assert queued.submit(snap(0))
    queued.shutdown(20.0)
    assert sink.snapshots == [snap(0)]
    assert len(sink.shutdowns) == 1 and 10.0 < sink.shutdowns[0] <= 20.0
    late = Gated()
    QueuedSink(late).shutdown(-1.0)
    assert late.shutdowns == [0.05]  # a spent budget still gives the sink a moment


def test_a_last_single_reservation_fills_a_full_queue_and_a_full_queue_reserves_none():
    queued, sink = held(1)
    assert queued.reserve(1) == 1  # an empty queue
    assert queued.submit(snap(1), reserved=True)  # the one reserved slot of a full queue
    assert queued.reserve(1) is None  # 1 queued + 1 > 1
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert [s.step.global_step for s in sink.snapshots] == [0, 1]
    queued.shutdown(WAIT_S)


def test_shutdown_ends_the_sink_call_with_at_most_its_grace_left():
    queued, sink = held(2)
    queued.shutdown(1.2)  # the worker stays in the held call
    # the worker was waited for until a quarter of the budget was left (0.3 s of 1.2 s)
    assert len(sink.shutdowns) == 1 and 0.05 <= sink.shutdowns[0] <= 0.3
    sink.gate.set()


def test_shutdown_keeps_at_most_half_a_second_of_grace_and_then_waits_only_that():
    queued, sink = held(2)
    queued.shutdown(2.4)  # a quarter would be 0.6 s: the grace is 0.5 s
    # at most the grace left; more than the 0.05 s floor unless the CPU was away 0.45 s
    assert len(sink.shutdowns) == 1 and 0.05 < sink.shutdowns[0] <= 0.5
    sink.gate.set()
    queued, sink = held(2)
    start = time.monotonic()
    queued.shutdown(0.4)  # the call is not ended by the sink's shutdown: given up at 0.4 s
    elapsed = time.monotonic() - start
    sink.gate.set()
    assert 0.4 <= elapsed < 1.2


def test_shutdown_past_its_deadline_does_not_wait_for_an_abandoned_call():
    sink = Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=0.05)
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while queued.stats().failed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the call is abandoned (past its 0.05 s timeout), counted failed
    stats = queued.stats()
    assert (stats.timed_out, stats.retried, stats.failed) == (1, 0, 1)
    start = time.monotonic()
    queued.shutdown(0.0)
    elapsed = time.monotonic() - start
    still_running = not sink.returned.is_set()  # shutdown returned before the call ended
    start = time.monotonic()
    queued.shutdown(5.0)  # done once: a second call waits for nothing
    again = time.monotonic() - start
    still_running = still_running and not sink.returned.is_set()
    sink.gate.set()
    assert still_running and elapsed < 0.8 and again < 2.5
    assert sink.shutdowns == []  # the sink is busy in the abandoned call: not entered


def test_a_retry_is_counted_retried_not_timed_out():
    sink = Gated([ExportResult.FAILURE])
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=0.001)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    stats = queued.stats()
    assert (stats.retried, stats.timed_out, stats.exported, stats.failed) == (1, 0, 1, 0)
    queued.shutdown(WAIT_S)


def test_out_of_retries_and_a_permanent_answer_are_logged_with_why_once_per_run(caplog):
    sink = Gated([ExportResult.FAILURE, ExportResult.FAILURE])
    queued = QueuedSink(sink, timeout_s=WAIT_S, max_retries=0)
    assert queued.submit(snap(0)) and queued.submit(snap(1))
    assert queued.force_flush(WAIT_S)
    assert caplog.text.count("export failed") == 1  # the second of the run is only counted
    assert "export failed: out of retries" in caplog.text
    assert sink.discarded == [snap(0), snap(1)]
    assert queued.stats().failed == 2
    queued.shutdown(WAIT_S)
    caplog.clear()
    permanent = QueuedSink(Gated([ExportResult.PERMANENT_FAILURE]), timeout_s=WAIT_S)
    assert permanent.submit(snap(0))
    assert permanent.force_flush(WAIT_S)
    assert f"export failed: returned {ExportResult.PERMANENT_FAILURE}" in caplog.text
    assert permanent.stats().failed == 1
    permanent.shutdown(WAIT_S)
    caplog.clear()

    class Raising(Gated):
        def export(self, snapshot, timeout_s=10.0):
            raise ValueError("bad value")

    raising = Raising()
    queued = QueuedSink(raising, timeout_s=WAIT_S)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    assert "export failed: raised ValueError: bad value" in caplog.text
    assert raising.discarded == [snap(0)] and queued.stats().failed == 1
    queued.shutdown(WAIT_S)


def test_a_closing_queue_still_retries_within_its_deadline():
    sink = Gated([ExportResult.FAILURE])
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=0.001)
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    queued.close(WAIT_S)  # the retry's backoff ends long before the drain deadline
    sink.gate.set()
    queued.shutdown(WAIT_S)
    stats = queued.stats()
    assert (stats.exported, stats.retried, stats.failed) == (1, 1, 0)
    assert sink.snapshots == [snap(0)]


def test_a_backoff_past_the_drain_deadline_gives_up_at_once():
    sink = Gated([ExportResult.FAILURE] * 3)
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=WAIT_S)
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    queued.close(5.0)  # a 30 s backoff would end after the deadline
    sink.gate.set()
    start = time.monotonic()
    queued.shutdown(WAIT_S)
    assert time.monotonic() - start < 5.0
    stats = queued.stats()
    assert (stats.exported, stats.retried, stats.failed) == (0, 0, 1)
    assert sink.discarded == [snap(0)] and len(sink.calls) == 1


@pytest.mark.parametrize("spill_after_s", [1.0, WAIT_S])
def test_an_overflow_is_not_used_before_failures_last_spill_after_s(spill_after_s):
    sink = Gated([ExportResult.FAILURE, ExportResult.FAILURE])
    sink.overflow = ListOverflow(sink)
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=0.001, spill_after_s=spill_after_s)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    assert sink.overflow.spilled == 0 and sink.snapshots == [snap(0)]
    stats = queued.stats()
    assert (stats.exported, stats.retried, stats.failed, stats.degraded) == (1, 2, 0, False)
    queued.shutdown(WAIT_S)


def test_the_documented_defaults():
    queued = QueuedSink(Gated())
    assert queued.policy == Delivery(1024, 10.0, 3, 0.05, 1.0, False, 2.0)
    for method in (QueuedSink.force_flush, QueuedSink.close, QueuedSink.shutdown):
        assert inspect.signature(method).parameters["timeout_s"].default == 10.0
    queued.shutdown(1.0)


def test_recovery_resets_the_failure_run_so_the_next_failure_degrades_and_is_logged(caplog):
    caplog.set_level(logging.INFO, logger="exporters.queued")
    sink = Gated([ExportResult.PERMANENT_FAILURE])
    queued = QueuedSink(sink, timeout_s=WAIT_S)
    assert queued.submit(snap(0)) and queued.submit(snap(1))
    assert queued.force_flush(WAIT_S)
    assert not queued.stats().degraded
    assert "recovered after 1 failures" in caplog.text
    sink.results = [ExportResult.PERMANENT_FAILURE]
    assert queued.submit(snap(2))
    assert queued.force_flush(WAIT_S)
    stats = queued.stats()
    assert (stats.failed, stats.exported, stats.degraded) == (2, 1, True)
    assert caplog.text.count("export failed") == 2
    queued.shutdown(WAIT_S)


def test_a_run_of_failures_logs_once_per_way_it_fails_then_its_end_with_the_count(caplog):
    caplog.set_level(logging.INFO, logger="exporters.queued")
    errors = [KeyError("k"), ValueError("v")] * 6  # alternating, a line per step before

    class Raising(Gated):
        def export(self, snapshot, timeout_s=10.0):
            if errors:
                raise errors.pop(0)
            return ExportResult.SUCCESS

    queued = QueuedSink(Raising(), timeout_s=WAIT_S)
    for step in range(13):
        assert queued.submit(snap(step))
    assert queued.force_flush(WAIT_S)
    assert caplog.text.count("export failed") == 2, caplog.text
    assert "raised KeyError: 'k'" in caplog.text and "raised ValueError: v" in caplog.text
    assert "recovered after 12 failures" in caplog.text
    assert queued.stats().failed == 12 and queued.stats().exported == 1
    queued.shutdown(WAIT_S)


def overflowing(queue_size: int, **kwargs) -> tuple[QueuedSink, Gated]:
    sink = Gated()
    sink.overflow = ListOverflow(sink)
    return QueuedSink(sink, queue_size=queue_size, timeout_s=WAIT_S, **kwargs), sink


def test_a_healthy_queue_spills_only_from_half_full():
    queued, sink = overflowing(4, spill_after_s=WAIT_S)
    sink.gate.clear()
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1))  # 1 of 4: below half
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.overflow.spilled == 0
    queued.shutdown(WAIT_S)

    queued, sink = overflowing(2, spill_after_s=WAIT_S)
    sink.gate.clear()
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1))  # 1 of 2: half full, spilled, then replayed in order
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    # step 0 too was half the queue: spilled as well when the worker came before it
    assert sink.overflow.spilled in (1, 2) and len(sink.overflow) == 0
    assert sink.snapshots == [snap(0), snap(1)]
    queued.shutdown(WAIT_S)

    queued, sink = overflowing(3, spill_after_s=WAIT_S)  # half of 3 rounds down to 1
    sink.gate.clear()
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1))
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.overflow.spilled in (1, 2) and sink.snapshots == [snap(0), snap(1)]
    queued.shutdown(WAIT_S)


def test_a_queue_of_one_keeps_a_failed_snapshot_in_memory_while_it_is_empty():
    """Half of 1 rounds down to 0, yet an empty queue is not half full: a snapshot that
    failed once waits for its retry in memory. (A snapshot queued while the worker is
    between two takes is half the queue and goes through the overflow: then nothing is
    held in memory, and the count does not move either.)"""
    queued, sink = overflowing(1, spill_after_s=WAIT_S, backoff_s=0.01, max_backoff_s=0.01)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    sink.gate.clear()
    sink.entered.clear()
    sink.results = [ExportResult.FAILURE]
    assert queued.submit(snap(1))
    assert sink.entered.wait(WAIT_S)
    spilled = sink.overflow.spilled
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.overflow.spilled == spilled and sink.snapshots == [snap(0), snap(1)]
    assert queued.stats().retried == 1
    queued.shutdown(WAIT_S)


def test_a_snapshot_held_through_a_long_backoff_spills_once_failures_last():
    queued, sink = overflowing(8, backoff_s=WAIT_S, max_backoff_s=WAIT_S, spill_after_s=0.2)
    sink.results = [ExportResult.FAILURE] * 100
    assert queued.submit(snap(0))
    assert sink.returned.wait(WAIT_S)  # answered FAILURE: the worker backs off for 30 s
    time.sleep(0.3)  # failures now last past spill_after_s; nothing else is queued
    deadline = time.monotonic() + 10.0
    while sink.overflow.spilled == 0 and time.monotonic() < deadline:
        assert queued.request_flush(0.01) is not None  # wakes the waiting worker
        time.sleep(0.02)
    assert sink.overflow.spilled == 1 and sink.overflow.entries == [snap(0)]
    queued.shutdown(0.5)


def test_a_forked_child_neither_shuts_the_parents_sink_down_nor_queues():
    sink = Gated()
    queued = QueuedSink(sink, timeout_s=WAIT_S)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)  # the worker exists, idle
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        try:
            queued.shutdown(1.0)
            checks = [
                sink.shutdowns == [],
                not queued.submit(snap(1)),
                queued.stats().dropped == 0,
                queued.reserve(1) is None,
                queued.request_flush(1.0) is None,
            ]
            os._exit(10 + checks.index(False) if False in checks else 0)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + WAIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if not done:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done and os.waitstatus_to_exitcode(status) == 0
    assert queued.stats().exported == 1
    queued.shutdown(WAIT_S)
    assert len(sink.shutdowns) == 1


def test_an_overflow_entry_is_replayed_with_backoff_while_the_sink_keeps_failing():
    queued, sink = overflowing(8, backoff_s=0.2, max_backoff_s=0.2, spill_after_s=0.05)
    sink.results = [ExportResult.FAILURE] * 100_000
    assert queued.submit(snap(0))
    deadline = time.monotonic() + WAIT_S
    while sink.overflow.spilled == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # failures last: the snapshot moves to the overflow
    assert sink.overflow.spilled == 1
    calls = len(sink.calls)
    time.sleep(1.0)
    replays = len(sink.calls) - calls
    queued.shutdown(0.5)
    assert 1 <= replays <= 10  # one every 0.2 s backoff, not a busy loop
    assert sink.overflow.entries == [snap(0)]


def gaps(calls: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(calls)]


def test_retries_back_off_doubling_from_backoff_s():
    sink = Gated([ExportResult.FAILURE] * 3)
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=0.05, max_backoff_s=WAIT_S)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    waits = gaps(sink.calls)
    assert len(waits) == 3 and queued.stats().retried == 3
    assert waits[0] >= 0.05 and waits[1] >= 0.1 and waits[2] >= 0.2
    queued.shutdown(WAIT_S)


def test_jittered_retries_wait_at_least_half_the_delay():
    sink = Gated([ExportResult.FAILURE] * 6)
    queued = QueuedSink(
        sink, timeout_s=WAIT_S, max_retries=6, backoff_s=0.1, max_backoff_s=0.1, jitter=True
    )
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    waits = gaps(sink.calls)
    assert len(waits) == 6 and min(waits) >= 0.05 and sink.snapshots == [snap(0)]
    queued.shutdown(WAIT_S)


def test_the_sinks_retry_pushback_lengthens_the_backoff_and_a_failing_one_is_ignored(caplog):
    sink = Gated([ExportResult.FAILURE])
    sink.pushback = 0.3
    queued = QueuedSink(sink, timeout_s=WAIT_S, backoff_s=0.001)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    assert gaps(sink.calls)[0] >= 0.3 and sink.snapshots == [snap(0)]
    queued.shutdown(WAIT_S)

    class BadPushback(Gated):
        def retry_after(self):
            raise RuntimeError("no pushback")

    bad = BadPushback([ExportResult.FAILURE])
    queued = QueuedSink(bad, timeout_s=WAIT_S, backoff_s=0.05)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    assert "retry_after failed" in caplog.text
    assert gaps(bad.calls)[0] >= 0.05 and bad.snapshots == [snap(0)]
    assert queued.stats().retried == 1
    queued.shutdown(WAIT_S)


def test_stats_are_a_copy_the_queue_never_changes_nor_reads():
    queued = QueuedSink(Gated())
    stats = queued.stats()
    stats.exported = 5
    assert queued.submit(snap(0)) and queued.force_flush(WAIT_S)
    assert (stats.exported, queued.stats().exported) == (5, 1)
    queued.shutdown(1.0)


def test_queued_and_reserved_slots_add_up_against_the_queue_size():
    queued, sink = held(2)
    assert queued.submit(snap(1))  # 1 queued
    assert queued.reserve(1) == 1  # 1 + 1 reserved: full
    assert not queued.submit(snap(2))  # an unreserved snapshot finds no slot
    assert queued.submit(snap(3), reserved=True)
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert [s.step.global_step for s in sink.snapshots] == [0, 1, 3]
    queued.shutdown(WAIT_S)


def test_past_the_drain_deadline_the_worker_exports_nothing_more():
    queued, sink = held(8)
    assert queued.submit(snap(1)) and queued.submit(snap(2))
    queued.close(0.0)  # the drain deadline has passed
    queued.close(WAIT_S)  # closed already: the deadline stays
    sink.gate.set()  # the worker comes back from step 0 and finds the deadline passed
    start = time.monotonic()
    queued.shutdown(WAIT_S)
    assert time.monotonic() - start < WAIT_S / 3  # the worker ended by itself
    assert sink.snapshots == [snap(0)]
    assert queued.stats().dropped == 2
    assert sink.events == ["discard 1", "discard 2", "shutdown"]  # the sink shut down last

    queued, sink = overflowing(8, spill_after_s=WAIT_S)
    sink.gate.clear()
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1)) and queued.submit(snap(2))
    queued.close(0.0)
    sink.gate.set()  # the overflow keeps what is left, in order
    queued.shutdown(WAIT_S)
    assert sink.snapshots == [snap(0)]
    assert sink.overflow.entries == [snap(1), snap(2)] and queued.stats().dropped == 0


def test_the_last_latency_is_the_export_calls_duration():
    start = time.monotonic()
    queued, sink = held(2)
    time.sleep(0.1)
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    elapsed = time.monotonic() - start
    latency = queued.stats().last_latency_s
    assert latency is not None and 0.1 <= latency <= elapsed
    queued.shutdown(WAIT_S)


def test_reservations_below_the_queue_size_are_taken_and_released_exactly():
    queued, sink = held(4)
    assert queued.submit(snap(1))
    assert [queued.reserve(1) for _ in range(4)] == [1, 1, 1, None]  # 1 queued + 3
    queued.release(1)  # 2 reserved left
    assert queued.reserve(1) == 1
    assert queued.reserve(1) is None
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_closing_during_a_long_backoff_gives_up_to_the_overflow_without_another_call():
    queued, sink = overflowing(8, backoff_s=WAIT_S, max_backoff_s=WAIT_S, spill_after_s=WAIT_S)
    sink.results = [ExportResult.FAILURE] * 100
    assert queued.submit(snap(0))
    assert sink.returned.wait(WAIT_S)  # answered FAILURE
    time.sleep(0.2)  # the worker waits out a 30 s backoff
    queued.close(5.0)  # the backoff would end after the drain deadline: give up now
    start = time.monotonic()
    queued.shutdown(WAIT_S)
    assert time.monotonic() - start < 4.0
    assert len(sink.calls) == 1 and sink.overflow.entries == [snap(0)]
    assert queued.stats().dropped == 0


def test_shutdown_ends_at_its_deadline_when_the_sinks_own_shutdown_hangs_too():
    class Hanging(Gated):
        def shutdown(self, timeout_s=10.0):
            super().shutdown(timeout_s)
            self.gate.wait(WAIT_S)

    queued, sink = held(2, Hanging())
    start = time.monotonic()
    queued.shutdown(0.4)
    elapsed = time.monotonic() - start
    sink.gate.set()
    assert len(sink.shutdowns) == 1 and elapsed < 5.0


def test_shutdown_waits_for_an_abandoned_call_only_until_its_deadline():
    sink = Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=0.05)
    assert queued.submit(snap(0))
    deadline = time.monotonic() + WAIT_S
    while queued.stats().failed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the call is abandoned (past its 0.05 s timeout), counted failed
    start = time.monotonic()
    queued.shutdown(0.2)
    elapsed = time.monotonic() - start
    sink.gate.set()
    assert elapsed < 0.9 and sink.shutdowns == []


def test_a_snapshot_the_overflow_fails_to_keep_is_logged_and_discarded(caplog):
    class Refusing(ListOverflow):
        def spill(self, snapshot):
            if snapshot.step.global_step == 1:
                raise OSError("disk full")
            super().spill(snapshot)

    sink = Gated()
    sink.overflow = Refusing(sink)
    queued = QueuedSink(sink, queue_size=8, timeout_s=WAIT_S, spill_after_s=WAIT_S)
    sink.gate.clear()
    released: list[int] = []
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    for step in (1, 2):
        charge = MemoryCharge(step, released.append)
        assert queued.submit(snap(step), charge)
        charge.done()
    queued.close(0.0)
    sink.gate.set()  # past the deadline: the worker spills what is left
    queued.shutdown(WAIT_S)
    assert sink.overflow.entries == [snap(2)] and sink.discarded == [snap(1)]
    assert "spilling failed" in caplog.text and sorted(released) == [1, 2]


def test_a_large_max_retries_is_honoured_exactly():
    sink = Gated([ExportResult.FAILURE] * 400)
    queued = QueuedSink(sink, timeout_s=WAIT_S, max_retries=300, backoff_s=0.0)
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)
    stats = queued.stats()
    assert (len(sink.calls), stats.retried, stats.failed, stats.exported) == (301, 300, 1, 0)
    queued.shutdown(WAIT_S)


def test_the_worker_survives_an_error_of_its_own_and_keeps_draining(caplog):
    def broken_release(nbytes: int) -> None:
        raise RuntimeError("release failed")

    queued, sink = held(4)
    charge = MemoryCharge(1, broken_release)
    assert queued.submit(snap(1), charge)
    charge.done()  # the caller's hold: the worker's is the last, its release raises
    assert queued.submit(snap(2))
    sink.gate.set()
    assert queued.force_flush(5.0)  # a dead worker would never answer
    assert sink.snapshots == [snap(0), snap(1), snap(2)]
    assert "worker error" in caplog.text
    queued.shutdown(WAIT_S)


def test_a_queue_found_past_half_full_spills_everything_queued():
    queued, sink = overflowing(8, spill_after_s=WAIT_S)
    sink.gate.clear()
    assert queued.submit(snap(0))
    assert sink.entered.wait(WAIT_S)
    for step in range(1, 6):  # 5 of 8 while the worker is in a call
        assert queued.submit(snap(step))
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.overflow.spilled == 5 and len(sink.overflow) == 0
    assert sink.snapshots == [snap(step) for step in range(6)]
    assert queued.depth() == 0 and queued.stats().queue_depth == 0
    queued.shutdown(WAIT_S)


def test_a_sinks_failing_discard_is_logged_and_never_reaches_the_caller(caplog):
    class BadDiscard(Gated):
        def discard(self, snapshot):
            raise RuntimeError("discard broke")

    queued, sink = held(1, BadDiscard())
    assert queued.submit(snap(1))
    assert not queued.submit(snap(2))  # full: discarded, and the discard raised
    assert "discard failed" in caplog.text and queued.stats().dropped == 1
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_a_reserved_snapshot_spilled_on_the_callers_thread_gives_its_slot_back():
    """A request admitted before an outage began fills its reserved slot in the overflow:
    the slot is free again, and the one still promised stays promised."""
    queued, sink = overflowing(4, spill_after_s=0.0, backoff_s=0.05, max_backoff_s=0.05)
    assert queued.reserve(3) == 3  # healthy: a request's three slots
    sink.results = [ExportResult.FAILURE] * 10**6
    assert queued.submit(snap(0), reserved=True)
    deadline = time.monotonic() + WAIT_S
    while not sink.overflow.entries and time.monotonic() < deadline:
        time.sleep(0.01)  # failing: the worker moves step 0 to the overflow
    assert sink.overflow.entries == [snap(0)]
    assert queued.submit(snap(1), reserved=True)
    assert sink.overflow.entries == [snap(0), snap(1)]  # spilled before submit returned
    sink.results = []
    assert queued.force_flush(WAIT_S) and sink.snapshots == [snap(0), snap(1)]
    assert queued.reserve(4) is None  # one slot of the three is still promised
    assert queued.reserve(3) == 3
    queued.shutdown(WAIT_S)


def test_a_healthy_sink_whose_journal_is_full_takes_no_request(tmp_path):
    sink = Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, queue_size=8, timeout_s=WAIT_S)
    queued.journal_to(Journal(tmp_path, 1))
    assert queued.submit(snap(0)) and sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1))
    assert queued.journal is not None and queued.journal.full
    assert queued.reserve(1) is None  # healthy: what it takes must be journaled
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_the_journal_is_acknowledged_once_the_queue_runs_idle(tmp_path):
    sink = Gated()
    queued = QueuedSink(sink, queue_size=8, timeout_s=WAIT_S)
    queued.journal_to(Journal(tmp_path, 1))  # full with one record not acknowledged
    assert queued.submit(snap(0))
    assert queued.force_flush(WAIT_S)  # exported, the queue idle: flushed and acknowledged
    assert queued.journal is not None and not queued.journal.full
    queued.shutdown(WAIT_S)


class FlakyFlush(Gated):
    """``force_flush`` raises for each True in ``raises`` in turn, then answers True."""

    def __init__(self, raises: list[bool]) -> None:
        super().__init__()
        self.raises = raises

    def force_flush(self, timeout_s=10.0):
        if self.raises and self.raises.pop(0):
            raise OSError("disk gone")
        return True


def test_a_run_of_failed_flushes_is_logged_at_its_first_and_when_it_ends(caplog):
    caplog.set_level(logging.INFO, logger="exporters.queued")
    queued = QueuedSink(FlakyFlush([False, True, True, False, True]), timeout_s=WAIT_S)
    said = lambda text: caplog.text.count(text)  # noqa: E731
    assert queued.force_flush(WAIT_S) and said("flushed again") == 0  # nothing to end
    assert not queued.force_flush(WAIT_S) and not queued.force_flush(WAIT_S)
    assert said("force_flush raised OSError: disk gone") == 1 and said("flushed again") == 0
    assert queued.force_flush(WAIT_S)
    assert said("flushed again after 2 failures") == 1
    assert not queued.force_flush(WAIT_S)  # a new run of failures: logged again
    assert said("force_flush raised OSError: disk gone") == 2
    queued.shutdown(WAIT_S)


def test_a_flush_fails_while_an_abandoned_export_still_runs():
    sink = Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=0.2)
    assert queued.submit(snap(0)) and sink.entered.wait(WAIT_S)
    assert not queued.force_flush(WAIT_S)  # the export outlived 0.2 s and still runs
    assert queued.stats().timed_out == 1
    sink.gate.set()
    queued.shutdown(WAIT_S)


class HungFlush(Gated):
    """``force_flush`` holds until ``flush_gate`` opens, then answers True."""

    def __init__(self) -> None:
        super().__init__()
        self.flush_gate = threading.Event()

    def force_flush(self, timeout_s=10.0):
        self.flush_gate.wait(WAIT_S)
        return True


def test_a_flush_past_its_timeout_fails_logged_and_one_refused_behind_it_is_not_counted(caplog):
    caplog.set_level(logging.INFO, logger="exporters.queued")
    sink = HungFlush()
    queued = QueuedSink(sink, timeout_s=WAIT_S)
    for _ in range(2):  # the first outlives 0.2 s; the second finds it still running
        marker = queued.request_flush(0.2)
        assert marker is not None and marker.done.wait(WAIT_S) and not marker.ok
    assert caplog.text.count("force_flush raised Stalled") == 1
    sink.flush_gate.set()
    deadline = time.monotonic() + WAIT_S
    while queued.stats().degraded and time.monotonic() < deadline:
        time.sleep(0.01)  # the abandoned flush returns: the sink is no longer stalled
    assert queued.force_flush(WAIT_S)
    assert "flushed again after 1 failures" in caplog.text  # the refused one is no failure
    queued.shutdown(WAIT_S)


def test_an_export_refused_behind_an_abandoned_one_fails_without_a_timeout():
    sink = Gated()
    sink.gate.clear()
    queued = QueuedSink(sink, timeout_s=0.2)
    assert queued.submit(snap(0)) and queued.submit(snap(1))
    deadline = time.monotonic() + WAIT_S
    while queued.stats().failed < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # step 0 abandoned past 0.2 s; step 1 refused while it runs
    stats = queued.stats()
    assert (stats.failed, stats.timed_out, len(sink.calls)) == (2, 1, 1)
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_one_snapshot_queued_behind_a_failing_replay_moves_to_the_overflow():
    """A snapshot queued before the first failure was known (the overflow being replayed)
    is spilled once failures last, even alone."""
    sink = Gated()
    sink.overflow = ListOverflow(sink)
    sink.overflow.entries = [snap(0)]  # an earlier process's
    sink.gate.clear()
    queued = QueuedSink(
        sink, timeout_s=WAIT_S, backoff_s=0.05, max_backoff_s=0.05, spill_after_s=0.0
    )
    assert sink.entered.wait(WAIT_S)  # the worker replays step 0, held at the gate
    assert queued.submit(snap(1))  # no failure known yet: queued in memory
    sink.results = [ExportResult.FAILURE] * 10**6
    sink.gate.set()
    deadline = time.monotonic() + WAIT_S
    while sink.overflow.entries != [snap(0), snap(1)] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.overflow.entries == [snap(0), snap(1)] and queued.depth() == 0
    queued.shutdown(0.5)


def test_a_sink_without_an_overflow_takes_snapshots_while_it_keeps_failing():
    sink = Gated([ExportResult.FAILURE] * 10**6)
    queued = QueuedSink(sink, timeout_s=WAIT_S, max_retries=10**6, backoff_s=0.01)
    assert queued.submit(snap(0))
    deadline = time.monotonic() + WAIT_S
    while queued.stats().retried < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queued.stats().retried >= 2  # failures last: no overflow to spill to
    assert queued.submit(snap(1)) and queued.depth() == 1  # queued in memory
    queued.shutdown(0.5)


def test_while_failures_are_young_the_caller_queues_in_memory():
    """An outage not yet ``spill_after_s`` old, an empty overflow: submit writes nothing."""
    queued, sink = overflowing(8, spill_after_s=WAIT_S, backoff_s=0.01, max_backoff_s=0.01)
    sink.results = [ExportResult.FAILURE] * 10**6
    assert queued.submit(snap(0))
    deadline = time.monotonic() + WAIT_S
    while queued.stats().retried < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queued.submit(snap(1))
    assert sink.overflow.entries == [] and queued.depth() == 1
    queued.shutdown(0.5)


class CountingFlush(Gated):
    """Records how many snapshots it held at each ``force_flush``."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[int] = []

    def force_flush(self, timeout_s=10.0):
        self.flushed_at.append(len(self.snapshots))
        return True


def test_the_journal_waits_for_an_idle_queue_before_it_flushes_the_sink(tmp_path):
    sink = CountingFlush()
    sink.gate.clear()
    queued = QueuedSink(sink, queue_size=8, timeout_s=WAIT_S)
    queued.journal_to(Journal(tmp_path, 1 << 20))
    assert queued.submit(snap(0)) and sink.entered.wait(WAIT_S)
    assert queued.submit(snap(1))  # queued behind step 0: the queue is not idle after it
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.flushed_at[0] == 2  # the checkpoint's flush came once step 1 was exported
    queued.shutdown(WAIT_S)


def test_a_stalled_export_with_an_overflow_is_counted_failed_not_spilled():
    sink = Gated()
    sink.overflow = ListOverflow(sink)
    queued = QueuedSink(sink, queue_size=8, timeout_s=0.2)
    sink.gate.clear()
    assert queued.submit(snap(0))
    deadline = time.monotonic() + WAIT_S
    while queued.stats().failed < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queued.stats().failed == 1 and sink.discarded == [snap(0)]
    assert sink.overflow.entries == []  # a call that never answered is not retried
    sink.gate.set()
    queued.shutdown(WAIT_S)


def test_with_an_empty_overflow_the_caller_never_spills_ahead_of_the_held_snapshot():
    """The worker holds step 0 inside a retry: snapshots submitted then stay queued behind
    it, even once the queue is half full; replayed in order after the outage."""
    queued, sink = overflowing(4, spill_after_s=WAIT_S, backoff_s=2.0, max_backoff_s=2.0)
    sink.results = [ExportResult.FAILURE] * 2
    assert queued.submit(snap(0)) and sink.returned.wait(WAIT_S)  # the first try failed
    sink.gate.clear()
    sink.entered.clear()
    assert sink.entered.wait(WAIT_S)  # the retry, held at the gate
    for step in (1, 2, 3):  # the third finds the queue half full
        assert queued.submit(snap(step))
    assert sink.overflow.entries == []  # nothing written ahead of step 0
    sink.gate.set()
    assert queued.force_flush(WAIT_S)
    assert sink.snapshots == [snap(0), snap(1), snap(2), snap(3)]
    queued.shutdown(WAIT_S)
