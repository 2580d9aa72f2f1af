"""Salvage against an in-process receiver that answers like Prometheus 2.42 (fast).

:class:`Prometheus` below stands in for the network only: it decodes each request with
:mod:`exporters.remote_write.proto` and answers as the real 2.42 does (the texts were taken
from it): the whole request refused with ``HTTP 400: out of order sample``, ``out of bounds``
or ``duplicate sample for timestamp`` at its first such sample, else every sample taken
(``204``). The real-Prometheus tests are in ``test_remote_write_salvage.py``.
"""

from __future__ import annotations

import copy
import math
from itertools import combinations

import pytest

from exporters.base import ExportResult
from exporters.remote_write import proto
from exporters.remote_write.salvage import Salvage, per_sample

T0 = 1_700_000_000_000  # ms
OUT_OF_ORDER = "HTTP 400: out of order sample"
OUT_OF_BOUNDS = "HTTP 400: out of bounds"
DUPLICATE = "HTTP 400: duplicate sample for timestamp"

Point = tuple[str, float, int]  # series name, value, timestamp (ms)


class Prometheus:
    """A remote-write receiver that answers like Prometheus 2.42.

    A request is refused whole (HTTP 400) at its first sample older than ``min_valid_ms``
    (out of bounds), older than its series' last stored sample (out of order) or at that
    sample's time with another value (duplicate); else all its samples are stored. Requests
    whose number (from 1) is in ``unavailable`` answer 503 (retryable); from request
    ``unauthorized_from`` on every request answers 401. More than ``limit`` requests fail
    the test (a salvage that never ends).
    """

    def __init__(
        self, held: tuple[Point, ...] = (), min_valid_ms: int = T0, limit: int = 10_000
    ) -> None:
        self.stored: dict[str, list[tuple[int, float]]] = {}
        for name, value, at_ms in held:
            self.stored.setdefault(name, []).append((at_ms, value))
        self.min_valid_ms = min_valid_ms
        self.limit = limit
        self.unavailable: set[int] = set()
        self.unauthorized_from: int | None = None
        self.requests: list[list[Point]] = []
        self.answers: list[tuple[ExportResult, str]] = []

    def __call__(self, payload: bytes) -> tuple[ExportResult, str]:
        points = [
            (labels["__name__"], value, at_ms)
            for labels, samples in proto.decode(payload)
            for value, at_ms in samples
        ]
        self.requests.append(points)
        assert len(self.requests) <= self.limit, "the salvage does not end"
        answer = self._answer(points)
        self.answers.append(answer)
        return answer

    def _answer(self, points: list[Point]) -> tuple[ExportResult, str]:
        n = len(self.requests)
        if n in self.unavailable:
            return ExportResult.FAILURE, "HTTP 503: unavailable"
        if self.unauthorized_from is not None and n >= self.unauthorized_from:
            return ExportResult.PERMANENT_FAILURE, "HTTP 401: Unauthorized"
        for name, value, at_ms in points:
            last = self.stored.get(name, [])[-1:]
            if at_ms < self.min_valid_ms:
                return ExportResult.PERMANENT_FAILURE, OUT_OF_BOUNDS
            if last and at_ms < last[0][0]:
                return ExportResult.PERMANENT_FAILURE, OUT_OF_ORDER
            if last and at_ms == last[0][0] and value != last[0][1]:
                return ExportResult.PERMANENT_FAILURE, DUPLICATE
        for name, value, at_ms in points:
            series = self.stored.setdefault(name, [])
            if not series or at_ms > series[-1][0]:
                series.append((at_ms, value))
        return ExportResult.SUCCESS, "204"


def _payload(points: list[Point]) -> bytes:
    labelled = [((("__name__", name), ("job", "salvage")), value, at) for name, value, at in points]
    payload, n = proto.encode(labelled)
    assert n == len(points)
    return payload


def _alone(receiver: Prometheus, points: list[Point]) -> Prometheus:
    """What ``receiver`` stores when every sample is sent alone, in order."""
    each = copy.deepcopy(receiver)
    for point in points:
        each(_payload([point]))
    return each


def _taken(receiver: Prometheus) -> list[Point]:
    """The samples of the requests ``receiver`` took, in the order they were sent."""
    return [
        point
        for points, (outcome, _) in zip(receiver.requests, receiver.answers)
        if outcome is ExportResult.SUCCESS
        for point in points
    ]


def _refused(receiver: Prometheus, points: list[Point]) -> str:
    """``receiver``'s answer to the request of ``points``, which it refuses for a sample;
    its requests are counted afresh from here."""
    outcome, detail = receiver(_payload(points))
    assert per_sample(outcome, detail), detail
    receiver.requests.clear()
    receiver.answers.clear()
    return detail


def _salvage(receiver: Prometheus, points: list[Point]) -> Salvage:
    """The request of ``points`` refused by ``receiver``, then salvaged through it."""
    salvage = Salvage(_payload(points), _refused(receiver, points))
    assert salvage.send(receiver)[0] is ExportResult.SUCCESS
    return salvage


def test_the_texts_of_prometheus_for_a_refused_sample_are_per_sample():
    refused = ExportResult.PERMANENT_FAILURE
    for detail in (OUT_OF_ORDER, OUT_OF_BOUNDS, DUPLICATE, "HTTP 400: Out Of Bounds"):
        assert per_sample(refused, detail), detail
    assert not per_sample(refused, "HTTP 400: proto: illegal wireType 7")  # another 400
    assert not per_sample(refused, "HTTP 409: out of order sample")  # another status
    assert not per_sample(refused, "out of order sample")  # no status at all
    for outcome in (ExportResult.FAILURE, ExportResult.SUCCESS):  # not a refusal
        assert not per_sample(outcome, OUT_OF_ORDER), outcome


def test_one_refused_sample_is_refused_alone_without_another_request():
    receiver = Prometheus(held=(("loss", 2.0, T0 + 100),))
    points = [("loss", 1.0, T0 + 50)]
    salvage = Salvage(_payload(points), _refused(receiver, points))
    assert salvage.send(receiver) == (ExportResult.SUCCESS, OUT_OF_ORDER)
    assert receiver.requests == []
    assert (salvage.taken, salvage.refused, salvage.requests) == (0, 1, 0)


def test_a_request_without_samples_sends_nothing():
    request = proto.WriteRequest()
    request.timeseries.add(labels=[{"name": "__name__", "value": "loss"}])  # no samples
    receiver = Prometheus()
    salvage = Salvage(request.SerializeToString(), OUT_OF_ORDER)
    assert salvage.send(receiver) == (ExportResult.SUCCESS, OUT_OF_ORDER)
    assert receiver.requests == []
    assert (salvage.taken, salvage.refused, salvage.requests) == (0, 0, 0)


@pytest.mark.parametrize("refused_first", [True, False])
def test_of_two_samples_the_one_refused_alone_is_dropped_and_the_other_taken(refused_first):
    receiver = Prometheus(held=(("loss", 2.0, T0 + 100),))
    held, new = ("loss", 1.0, T0 + 50), ("reward", 3.0, T0 + 50)
    points = [held, new] if refused_first else [new, held]
    salvage = _salvage(receiver, points)
    assert receiver.requests == [[points[0]], [points[1]]]  # in the request's order
    assert (salvage.taken, salvage.refused, salvage.requests) == (1, 1, 2)
    assert receiver.stored == {"loss": [(T0 + 100, 2.0)], "reward": [(T0 + 50, 3.0)]}
    assert salvage.detail == OUT_OF_ORDER


def _request(n: int, refused: tuple[int, ...]) -> tuple[Prometheus, list[Point]]:
    """A receiver and ``n`` samples of which those at ``refused`` are refused, by turns out
    of order, out of bounds and duplicates; each other sample is of a series of its own."""
    held, points = [], []
    for i in range(n):
        if i not in refused:
            points.append((f"s{i}", float(i), T0 + 10 + i))
            continue
        kind = refused.index(i) % 3
        if kind == 0:  # out of order
            held.append((f"s{i}", -1.0, T0 + 1_000))
            points.append((f"s{i}", float(i), T0 + 10 + i))
        elif kind == 1:  # out of bounds
            points.append((f"s{i}", float(i), T0 - 1))
        else:  # duplicate
            held.append((f"s{i}", -1.0, T0 + 10 + i))
            points.append((f"s{i}", float(i), T0 + 10 + i))
    return Prometheus(held=tuple(held)), points


def test_every_sample_is_taken_as_if_sent_alone_within_the_bound():
    """Every set of refused samples in requests of up to 8: the receiver stores what it
    stores when each sample is sent alone, the taken requests in the request's order, in at
    most 2·r·⌈log2 N⌉ requests."""
    for n in range(2, 9):
        for r in range(1, n + 1):
            for refused in combinations(range(n), r):
                receiver, points = _request(n, refused)
                expected = _alone(receiver, points).stored
                salvage = _salvage(receiver, points)
                case = (n, refused)
                assert receiver.stored == expected, case
                assert _taken(receiver) == [p for i, p in enumerate(points) if i not in refused]
                assert (salvage.taken, salvage.refused) == (n - r, r), case
                assert salvage.requests == len(receiver.requests), case
                assert salvage.requests <= 2 * r * math.ceil(math.log2(n)), case


def test_one_refused_sample_anywhere_costs_at_most_two_requests_per_halving():
    for n in (9, 16, 33, 64, 100):
        for position in range(n):
            receiver, points = _request(n, (position,))
            salvage = _salvage(receiver, points)
            assert (salvage.taken, salvage.refused) == (n - 1, 1), (n, position)
            assert salvage.requests <= 2 * math.ceil(math.log2(n)), (n, position)


def test_a_retryable_failure_returns_and_the_part_goes_first_at_the_next_call():
    receiver, points = _request(6, (0, 4))
    expected = _alone(receiver, points).stored
    salvage = Salvage(_payload(points), _refused(receiver, points))
    receiver.unavailable = {3}
    assert salvage.send(receiver) == (ExportResult.FAILURE, "HTTP 503: unavailable")
    assert len(receiver.requests) == salvage.requests == 3  # the failed one counted
    failed = receiver.requests[-1]
    assert salvage.send(receiver)[0] is ExportResult.SUCCESS
    assert receiver.requests[3] == failed  # sent again first
    assert receiver.stored == expected
    assert (salvage.taken, salvage.refused, salvage.requests) == (4, 2, len(receiver.requests))


def test_a_part_refused_for_another_reason_is_refused_whole_not_split():
    """Out of 4 samples the first is out of order: its half is split (2 requests) and the
    receiver then answers 401 to the second half, which is counted refused whole."""
    receiver, points = _request(4, (0,))
    salvage = Salvage(_payload(points), _refused(receiver, points))
    receiver.unauthorized_from = 4
    assert salvage.send(receiver) == (ExportResult.SUCCESS, "HTTP 401: Unauthorized")
    assert receiver.requests == [points[:2], points[:1], points[1:2], points[2:]]
    assert (salvage.taken, salvage.refused, salvage.requests) == (1, 3, 4)
    assert salvage.detail == "HTTP 401: Unauthorized"
