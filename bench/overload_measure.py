"""What the overload bench measures in the collector's process: delivery, memory, CPU.

:class:`Ledger` is a sink that records which tagged requests reached it;
:class:`Memory` samples the process's RSS; the rest are small readings and formats.
"""

from __future__ import annotations

import os
import resource
import threading
import time

from overload_clients import TAG

from exporters.base import ExportResult, Sink
from exporters.prometheus import PrometheusSink
from telemetry.model.snapshot import Snapshot

PAGE = os.sysconf("SC_PAGE_SIZE")


class Ledger(Sink):
    """Counts what reaches it: (client, seq) -> points, duplicates, untagged snapshots.

    With ``delay_s`` it also sleeps that long per point: a slow backend (W&B, a remote
    store) that bounds the sustainable rate without taking CPU.
    """

    name = "ledger"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.received: dict[tuple[str, int], int] = {}
        self.duplicates = 0
        self.untagged = 0

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        if self.delay_s:
            time.sleep(self.delay_s * len(snapshot.points))
        for point in reversed(snapshot.points):
            if point.metric == TAG:
                key = (dict(point.attributes)["client"], int(point.value))
                if key in self.received:
                    self.duplicates += 1
                self.received[key] = len(snapshot.points)
                break
        else:
            self.untagged += 1
        return ExportResult.SUCCESS


class Memory:
    """Samples this process's RSS every 10 ms; :meth:`peak_between` gives a phase's peak."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def rss() -> int:
        """This process's resident set size now, in bytes."""
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * PAGE

    @staticmethod
    def hwm() -> int:
        """This process's peak resident set size so far (VmHWM), in bytes."""
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.samples.append((time.monotonic(), self.rss()))

    def peak_between(self, start: float, end: float) -> int:
        """The largest RSS sampled between two ``time.monotonic()`` readings."""
        return max((rss for t, rss in self.samples if start <= t <= end), default=0)

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def cpu_s() -> float:
    """CPU seconds (user + system) this process used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    """The machine's 1/5/15-minute load averages, as ``a/b/c``."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of latencies in seconds, in milliseconds (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3


def mib(n: float) -> str:
    """``n`` bytes as MiB text."""
    return f"{n / 2**20:,.1f} MiB"


def family_total(prometheus: PrometheusSink, name: str, sample: str) -> float:
    """The sum of one family's samples named ``sample`` in the Prometheus sink."""
    return sum(
        s.value
        for family in prometheus.collect()
        if family.name == name
        for s in family.samples
        if s.name == sample
    )
