"""A spool an earlier process left on disk: the next process with the same config sends it
from its start, also when it commits nothing, and says so in one line with the command
that sends it without a run."""

from __future__ import annotations

import logging
import time

from rltel.logger import StatsLogger
from tests.telemetry.otlp_receiver import Receiver, step_of

from .test_outage import entries, spool_left_by_a_run


def test_a_process_that_commits_nothing_sends_an_earlier_spool_and_says_so(tmp_path, caplog):
    receiver = Receiver()  # down while the first run commits
    spool_dir = spool_left_by_a_run(tmp_path, receiver.endpoint, 4)
    trainer = spool_dir / "trainer"
    left = entries(spool_dir)
    assert len(left) == 5  # 4 steps and the close marker
    config = {"fileroot": str(tmp_path), "otlp": {"endpoint": receiver.endpoint}}
    config["otlp"]["spool_dir"] = str(spool_dir)
    with receiver, caplog.at_level(logging.WARNING, logger="exporters.otlp"):
        stats = StatsLogger(config)  # commits nothing
        try:
            assert receiver.wait_for(lambda requests: len(requests) >= 5, 60.0)
            deadline = time.monotonic() + 30.0
            while entries(spool_dir):  # each entry leaves the disk once it was answered
                assert time.monotonic() < deadline, entries(spool_dir)
                time.sleep(0.01)
        finally:
            stats.close(5.0)
    assert [step_of(request) for request in receiver.requests] == [0, 1, 2, 3, 3]
    lines = [r.getMessage() for r in caplog.records if r.name == "exporters.otlp"]
    points = sum(part.num_points for part in left)
    assert lines == [
        f"otlp: 5 requests ({points} points; steps 0-3) that an earlier process left in "
        f"{trainer} are sent first; if this process ends before they are, send them with: "
        f"rltel spool flush {trainer} --endpoint {receiver.endpoint}"
    ]
