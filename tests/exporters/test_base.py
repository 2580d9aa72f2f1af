import threading

from exporters.base import ExportResult, InMemorySink, RunSink
from telemetry.snapshot import Snapshot


class FailingRun(RunSink):
    name = "failing"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.finished = 0

    def export(self, snapshot, timeout_s=10.0):
        return ExportResult.SUCCESS

    def _finish(self) -> None:
        self.finished += 1
        raise OSError("disk gone")


def test_run_sink_finishes_once_and_never_raises(caplog):
    sink = FailingRun()
    sink.shutdown()
    sink.shutdown()
    assert sink.finished == 1
    assert "failing: finishing failed" in caplog.text


def test_in_memory_sink_keeps_snapshots_in_order():
    sink = InMemorySink()
    first, second = Snapshot(()), Snapshot((), stream="rollout")
    assert sink.export(first) is ExportResult.SUCCESS
    sink.export(second)
    assert sink.snapshots == [first, second]
