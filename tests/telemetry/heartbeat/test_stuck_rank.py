"""A stuck rank is named by a real Prometheus and Alertmanager, from rank 0's endpoint.

Every rank's heartbeat (1 s) reaches rank 0's Prometheus endpoint through the job's store,
so the alert comes while rank 0's own training thread waits at the collective (the job:
:mod:`tests.telemetry.heartbeat.stuck`; ``heartbeat.stall_floor_s`` 10 s).
"""

from __future__ import annotations

import pytest

from tests.distributed import free_port
from tests.telemetry.heartbeat.stuck import stuck_job

HEARTBEAT = {"interval_s": 1.0, "stall_floor_s": 10.0}


@pytest.mark.timeout(300)
def test_a_stuck_rank_and_its_phase_reach_the_webhook(tmp_path):
    port = free_port()
    sink = {"prometheus": {"enabled": True, "port": port}, "heartbeat": HEARTBEAT}
    _, ranks = stuck_job(tmp_path, f"127.0.0.1:{port}", sink)
    # every rank exited cleanly, said so through the store, and raised nothing
    assert ranks[0] == [(0, True), (1, True), (2, True)]
