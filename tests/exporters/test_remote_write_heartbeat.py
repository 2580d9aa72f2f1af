"""The collector remote-writes the ranks' heartbeats into a real Prometheus (its remote-write
receiver on a free loopback port), with the labels it serves on ``/metrics``, also with
``self_metrics`` off: beats sent over real gRPC to an in-process collector, its refresh
every 0.3 s. A rank that changes phase ends its old phase's series with a staleness marker
(one series left per rank: without it the old phase's value would be read for 5 minutes),
the shipped ``RLRankStuck`` expression evaluated on that Prometheus names the stuck rank
and its current phase, and a reader that closes ends every series of its run.
"""

from __future__ import annotations

import math
import struct
import time

import pytest
import yaml

from collector.config import from_dict
from collector.server import CollectorServer
from dashboards import build
from exporters.remote_write import proto
from exporters.remote_write.timeline import STALE, Timeline
from telemetry.heartbeat import Beat, BeatGroup
from tests.collector.test_heartbeat_board import sender
from tests.collector.test_remote_write_e2e import receiver, wait_for
from tests.dashboards import servers
from tests.distributed import free_port

pytestmark = pytest.mark.timeout(180)

RUN = ("rw", "hb", "trainer")
PHASE = "rltel_heartbeat_phase_start_timestamp_seconds"


def _stuck_expr() -> str:
    shipped = yaml.safe_load(build.ALERTS_PATH.read_text())
    group = next(g for g in shipped["groups"] if g["name"] == "rltel-heartbeat")
    return next(r for r in group["rules"] if r["alert"] == "RLRankStuck")["expr"]


def _beats(now: float, phase_of_1: str, entered_1: float) -> tuple[Beat, ...]:
    """Rank 0 waits outside every phase, rank 1 is in ``phase_of_1``; neither made progress
    for 500 s (the median step is 10 s, the floor 60 s)."""
    waiting = Beat(0, "n0", 7, "", now - 300, now - 500, 10.0, now)
    busy = Beat(1, "n1", 7, phase_of_1, entered_1, now - 500, 10.0, now)
    return waiting, busy


def _query(prometheus: str, expr: str) -> list[dict]:
    return servers.api(prometheus, "query", query=expr)["result"]


def test_the_stale_marker_is_prometheus_special_nan_and_follows_the_series():
    timeline = Timeline({})
    key = (("__name__", "x"),)
    timeline._at(key, 1.0, 1000)
    (marker,) = timeline.ended([key, (("__name__", "never"),)], 1000)
    assert marker[0] == key and marker[2] == 1001  # after its last sample, in order
    assert struct.pack("<d", marker[1]) == struct.pack("<Q", 0x7FF0000000000002)
    ((_, [(value, _)]),) = proto.decode(proto.encode([marker])[0])
    assert math.isnan(value) and struct.pack("<d", value) == struct.pack("<d", STALE)


def test_heartbeats_are_remote_written_and_a_phase_change_ends_the_old_series(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with receiver(tmp_path, port):
        sinks = {
            "prometheus": {"port": 0},
            "remote_write": {
                "enabled": True,
                "url": f"{url}/api/v1/write",
                "collector": "node-a",
                "cluster": "test",
                "interval_s": 0.3,
                "self_metrics": False,
            },
        }
        server = CollectorServer(from_dict({"receiver": {"port": 0}, "sinks": sinks}))
        server.start()
        try:
            send = sender(server.endpoint)
            now = time.time()
            send(BeatGroup(RUN, 60.0, _beats(now, "rollout", now - 450)), False)
            first = wait_for(lambda: _query(url, f'{PHASE}{{rank="1"}}'), 60, "rank 1 written")
            assert [s["metric"]["phase"] for s in first] == ["rollout"]
            labels = first[0]["metric"]
            assert (labels["job"], labels["instance"]) == ("rltel-collector", "node-a")
            assert (labels["collector"], labels["cluster"], labels["role"]) == (
                "node-a",
                "test",
                "trainer",
            )
            assert "worker" not in labels  # a trainer's ranks carry none
            assert not _query(url, 'up{job="rltel-collector"}')  # self_metrics off

            send(BeatGroup(RUN, 60.0, _beats(now + 1, "ppo_actor/update", now - 420)), False)
            moved = f'{PHASE}{{rank="1", phase="ppo_actor/update"}}'
            wait_for(lambda: _query(url, moved), 60, "the new phase written")
            live = _query(url, f'{PHASE}{{rank="1"}}')
            assert [s["metric"]["phase"] for s in live] == ["ppo_actor/update"]  # old: ended

            (stuck,) = _query(url, _stuck_expr())
            assert (stuck["metric"]["rank"], stuck["metric"]["phase"]) == ("1", "ppo_actor/update")
            assert stuck["metric"]["host"] == "n1"
            assert float(stuck["value"][1]) >= 420

            send(BeatGroup(RUN, 60.0, (Beat(0, "n0", 8, "", now, now, 10.0, now + 2, True),)), True)
            wait_for(
                lambda: not _query(url, '{__name__=~"rltel_heartbeat_.*"}'), 60, "run's beats end"
            )
            assert not _query(url, _stuck_expr())
        finally:
            server.stop(10)
