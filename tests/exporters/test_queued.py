"""The delivery model's parts, deterministic (events, no timing asserts): Charge,
TimedCaller, and QueuedSink's bookkeeping behind a gated sink."""

from __future__ import annotations

import threading

import pytest

from exporters.calls import Busy, Stalled, TimedCaller
from exporters.charge import Charge


def test_charge_releases_its_bytes_once_when_the_last_hold_is_done():
    released: list[int] = []
    charge = Charge(123, released.append)
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
    Charge(7, released.append).done()
    assert released == [7]


def test_charge_holds_from_many_threads_are_counted_exactly():
    released: list[int] = []
    charge = Charge(5, released.append)
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
    with pytest.raises(Stalled):
        caller.call(hung, 0.05)
    assert entered.is_set()
    assert caller.stalled
    with pytest.raises(Busy):
        caller.call(lambda: calls.append("second"), 5.0)
    assert calls == ["hung"]  # the second call never entered the sink
    caller.join_stalled(0.01)  # still running: only waits
    assert caller.stalled
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
    caller.join_stalled(-5.0)
    assert caller.stalled
    release.set()
    caller.join_stalled(30.0)
    assert not caller.stalled
