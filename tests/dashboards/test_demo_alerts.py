"""A healthy ``rltel demo`` run raises no alert, evaluated by a real Prometheus.

Prometheus scrapes the demo's own endpoint (embedded default) every second and evaluates the
shipped rules (every group every second, ``for`` as shipped) plus one canary rule that
fires on any ``rltel_step``, which shows that the rules saw the run. The series every RL
alert reads must be among those the demo exposes.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from dashboards import build
from dashboards import catalog as c
from tests.dashboards import servers
from tests.distributed import free_port

STEPS = 8
CANARY = "RltelTestCanary"


def _rules() -> dict:
    rules = yaml.safe_load(build.ALERTS_PATH.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    canary = {"alert": CANARY, "expr": f"{c.STEP.name} >= 0", "for": "0s"}
    rules["groups"].append({"name": "canary", "interval": "1s", "rules": [canary]})
    return rules


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_healthy_demo_raises_no_alert(tmp_path):
    port = free_port()
    rules = tmp_path / "alerts.yml"
    rules.write_text(yaml.safe_dump(_rules()))
    config = servers.prometheus_config(f"127.0.0.1:{port}", None, rules, fast=True)
    with servers.prometheus(tmp_path, config) as prometheus:
        log = (tmp_path / "demo.log").open("wb")
        demo = subprocess.Popen(
            [sys.executable, "-m", "rltel.cli", "demo", "--steps", str(STEPS),
             "--fileroot", str(tmp_path / "runs"), "--prometheus-port", str(port),
             "--serve-seconds", "30"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            last = f"{c.STEP.name} == {STEPS - 1}"
            while not servers.api(prometheus, "query", query=last)["result"]:
                assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the demo's last step was never scraped"
                time.sleep(0.5)
            time.sleep(3)  # a few more evaluations of the final state
            seen = servers.api(
                prometheus, "query", query="count by (alertname, alertstate) (ALERTS)[10m:1s]"
            )["result"]
            names = {
                name
                for name in (
                    c.KL_K3.stat("avg"),
                    c.LOSS.stat("avg"),
                    c.GRAD_NORM.name,
                    c.ROLLOUT_REWARD.name,
                    c.TOTAL_TOKENS.name,
                    c.MAX_OVER_IDEAL.name,
                    c.STALENESS_THETA_AVG.stat("avg"),
                    c.FUTURE_TOKEN_FRACTION.stat("avg"),
                    c.NONFINITE_LOGP_FRACTION.stat("avg"),
                )
                if not servers.api(prometheus, "query", query=name)["result"]
            }
        finally:
            demo.terminate()
            demo.wait(timeout=60)
            log.close()
    assert names == set(), f"the demo exposes none of {sorted(names)}"
    fired = {(s["metric"]["alertname"], s["metric"]["alertstate"]) for s in seen}
    assert (CANARY, "firing") in fired  # the rules were evaluated on the demo's series
    assert {alert for alert, state in fired if state == "firing"} == {CANARY}, sorted(fired)
