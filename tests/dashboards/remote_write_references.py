"""The remote-write receiver of the panel test, and what the Pipeline board's remote-write
row must show.

The panel test's collector remote-writes to a :class:`~tests.exporters.test_remote_write.
Receiver` (a real HTTP server that decodes each write and answers 204), with no refresh
during the test (``interval_s`` an hour), so each write carries a step's samples. After each
step is delivered, :data:`LEDGER` records how many samples the receiver decoded so far
(counted on the receiving side, never by the sink) and the last accepted write's time in the
exposition the test publishes (the one input the receiver cannot know to the microsecond).
The references: the sent rate is the receiver's increase over the window per second; the age
is the evaluation time minus that time, as Prometheus computes ``time() - x`` in float64; the
link was never down, so pending, dropped, rejected, late and retries are 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from exporters.remote_write.health import DROP_REASONS
from exporters.remote_write.health import PREFIX as RW
from tests.dashboards.references import Reference, Window
from tests.exporters.test_remote_write import Receiver


@dataclass
class Ledger:
    """After each published step: samples the receiver decoded, the sink's last success."""

    receiver: Receiver | None = None
    instance: str = ""  # the collector's scrape address (its ``instance`` label)
    received: list[int] = field(default_factory=list)
    last_success: list[float] = field(default_factory=list)

    def record(self, exposition: bytes) -> None:
        """Note the receiver's total and the published exposition's last-success time; the
        last entry is replaced when a step is published again."""
        assert self.receiver is not None
        received = sum(
            len(samples) for _, series in self.receiver.requests for _, samples in series
        )
        (last,) = [
            sample.value
            for family in text_string_to_metric_families(exposition.decode())
            for sample in family.samples
            if sample.name == f"{RW}last_success_timestamp_seconds"
        ]
        self.received.append(received)
        self.last_success.append(last)


LEDGER = Ledger()
"""Filled by the panel test's fixture as it publishes each step (one per test process)."""


@dataclass(frozen=True)
class TimedReference:
    """A reference whose values depend on the evaluation time too (``time()``)."""

    by: tuple[str, ...]
    values: Callable[[Window, int], dict]


def config(receiver: Receiver) -> dict:
    """The collector's ``remote_write`` section for the panel test."""
    LEDGER.receiver = receiver
    return {"enabled": True, "url": receiver.url, "collector": "panels", "interval_s": 3600.0}


def _at(window: Window) -> int:
    """The ledger's entry for the window's last step."""
    return len(window.end) - 1


def _sent(w: Window) -> dict:
    start, end = LEDGER.received[len(w.start) - 1], LEDGER.received[_at(w)]
    return {(): (end - start) / w.seconds}


def _age(w: Window, time_ms: int) -> dict:
    return {(): time_ms / 1000 - LEDGER.last_success[_at(w)]}


_ZERO = Reference((), lambda w: {(): 0.0})
_ZERO_PER_INSTANCE = Reference(("instance",), lambda w: {(LEDGER.instance,): 0.0})

REMOTE_WRITE_REFERENCES = {
    ("pipeline", "Remote write degraded", "A"): _ZERO,
    ("pipeline", "Samples pending (backlog)", "A"): _ZERO,
    ("pipeline", "Since the last accepted write", "A"): TimedReference((), _age),
    ("pipeline", "Samples dropped (10m)", "A"): _ZERO,
    ("pipeline", "Remote-write samples/s", "A"): Reference((), _sent),
    ("pipeline", "Remote-write samples/s", "B"): _ZERO,
    ("pipeline", "Remote-write samples/s", "C"): Reference(
        ("reason",), lambda w: dict.fromkeys(((r,) for r in DROP_REASONS), 0.0)
    ),
    ("pipeline", "Remote-write samples/s", "D"): _ZERO,
    ("pipeline", "Remote-write backlog and retries", "A"): _ZERO_PER_INSTANCE,
    ("pipeline", "Remote-write backlog and retries", "B"): _ZERO_PER_INSTANCE,
}
"""The remote-write row's references (the age's takes the evaluation time too)."""
