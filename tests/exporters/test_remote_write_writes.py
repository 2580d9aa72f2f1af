"""The remote-write backlog (exporters.remote_write.writes): bounded by samples, in order,
the batch in flight counted until it is done."""

from __future__ import annotations

from exporters.remote_write.writes import Write, Writes


def _write(samples: int, newest_ms: int = 1_000) -> Write:
    return Write(b"x" * samples, samples, newest_ms)


def test_add_drops_the_oldest_writes_past_the_bound_and_keeps_the_newest():
    writes = Writes()
    first, second, third = _write(2), _write(3), _write(4)
    assert writes.add(first, bound=9) == [] and writes.add(second, bound=9) == []
    assert writes.add(third, bound=9) == []  # 9 exactly: within the bound
    assert writes.pending == 9
    fourth = _write(1)
    assert writes.add(fourth, bound=9) == [first]  # 10 > 9: the oldest goes
    assert writes.pending == 8 and list(writes.queue) == [second, third, fourth]
    huge = _write(50)
    assert writes.add(huge, bound=9) == [second, third, fourth]  # the newest always stays
    assert writes.pending == 50 and list(writes.queue) == [huge]


def test_the_batch_in_flight_comes_on_top_of_the_bound():
    writes = Writes()
    for samples in (3, 3):
        writes.add(_write(samples), bound=6)
    batch, _ = writes.take(oldest_ms=0, max_samples=3)
    assert [w.samples for w in batch] == [3] and writes.sending == 3 and writes.pending == 6
    assert writes.add(_write(3), bound=6) == []  # 9 pending, 3 of them in flight
    assert [w.samples for w in writes.add(_write(1), bound=6)] == [3]


def test_take_batches_up_to_max_samples_unless_one_write_holds_more():
    writes = Writes()
    sizes = (2, 1, 2, 4, 10, 1)
    for samples in sizes:
        writes.add(_write(samples), bound=100)
    taken = []
    while writes.queue:
        batch, too_old = writes.take(oldest_ms=0, max_samples=5)
        assert too_old == [] and writes.sending == sum(w.samples for w in batch)
        taken.append([w.samples for w in batch])
        assert writes.done() == batch and writes.sending == 0
    assert taken == [[2, 1, 2], [4], [10], [1]]  # 5 exactly fits; 10 goes alone
    assert writes.pending == 0 and writes.inflight == []


def test_take_drops_the_writes_whose_newest_sample_is_too_old():
    writes = Writes()
    old, edge, new = _write(2, newest_ms=99), _write(3, newest_ms=100), _write(4, newest_ms=50)
    for write in (old, edge, new):
        writes.add(write, bound=100)
    batch, too_old = writes.take(oldest_ms=100, max_samples=100)
    assert too_old == [old, new] and batch == [edge]  # at oldest_ms: still sent
    assert writes.pending == 3 and writes.sending == 3


def test_put_first_queues_ahead_in_order_and_clear_gives_back_everything():
    writes = Writes()
    later = _write(1)
    writes.add(later, bound=100)
    kept = [Write(b"a", 2, 5, kept=True), Write(b"b", 3, 6, kept=True)]
    writes.put_first(kept)
    assert list(writes.queue) == [*kept, later] and writes.pending == 6
    assert [w.kept for w in writes.queue] == [True, True, False]
    batch, _ = writes.take(oldest_ms=0, max_samples=2)
    assert batch == kept[:1]
    assert writes.clear() == [*kept, later]  # the batch in flight first
    assert (writes.pending, writes.sending, writes.inflight, list(writes.queue)) == (0, 0, [], [])
