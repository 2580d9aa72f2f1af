"""End to end: producers -> rltel -> real Prometheus -> real Alertmanager -> webhook.

Two tests, each with real servers on free loopback ports (stopped by PID at the end):

- Routing: the sink holds one export of the real producers for two runs, one whose
  train/infer KL is above both thresholds and one below. Prometheus scrapes and evaluates
  every second with every ``for`` set to 0, so the test reads back within seconds which
  alerts reach Alertmanager, with which labels, receivers and inhibitions.
- Latency, with everything as shipped: the StatsLogger commits over OTLP to a real collector,
  Prometheus runs ``prometheus.yml``'s scrape interval and ``alerts.yml`` unchanged, and
  Alertmanager ``alertmanager.yml`` with only the webhook URL pointed at the example
  receiver (:mod:`dashboards.webhook`). The time from the commit that crosses the critical
  KL threshold to the webhook call is measured and must stay within 30 s.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from collector.config import from_dict
from collector.server import CollectorServer
from dashboards import alerts, build
from dashboards.webhook import WebhookReceiver
from exporters.prometheus import PrometheusSink
from rltel.logger import StatsLogger
from telemetry.config import PrometheusConfig
from telemetry.record.stats import Stats
from tests.dashboards import servers
from tests.dashboards.producers import produced_points, snapshot

DEADLINE_S = 45.0
LATENCY_BUDGET_S = 30.0
HIGH_SHIFT, LOW_SHIFT = 0.5, 0.001


def _kl_k3(d: float) -> float:
    """exp(d) - 1 - d, the seed's k3 estimator, for a constant per-token difference d."""
    return math.expm1(d) - d


def _fast_rules() -> dict:
    """The repository's rules with ``for`` 0s and a 1 s group interval; exprs unchanged."""
    rules = yaml.safe_load(build.ALERTS_PATH.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule["for"] = "0s"
    return rules


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver(out=None)
    try:
        yield receiver
    finally:
        receiver.shutdown()


@pytest.fixture
def sink() -> Iterator[PrometheusSink]:
    sink = PrometheusSink(PrometheusConfig(enabled=True, port=0))
    try:
        yield sink
    finally:
        sink.shutdown()


def _alerts(alertmanager: str) -> list[dict]:
    return json.loads(servers.get(alertmanager + "/api/v2/alerts"))


@pytest.mark.timeout(90)
def test_kl_alert_reaches_alertmanager(tmp_path, sink, webhook):
    rules = tmp_path / "alerts.yml"
    rules.write_text(yaml.safe_dump(_fast_rules()))
    with servers.alertmanager(tmp_path, webhook.url) as alertmanager:
        config = servers.prometheus_config(f"127.0.0.1:{sink.port}", alertmanager, rules, True)
        with servers.prometheus(tmp_path, config):
            started = time.monotonic()
            assert sink.export(snapshot(produced_points(HIGH_SHIFT), "high")).value == "success"
            assert sink.export(snapshot(produced_points(LOW_SHIFT), "low")).value == "success"
            wanted = {"RLTrainInferKLHigh", "RLTrainInferKLCritical"}
            held: list[dict] = []
            while time.monotonic() - started < DEADLINE_S:
                held = _alerts(alertmanager)
                if wanted <= {a["labels"]["alertname"] for a in held}:
                    break
                time.sleep(0.25)
    by_name = {a["labels"]["alertname"]: a for a in held}
    assert wanted <= set(by_name), f"after {DEADLINE_S} s Alertmanager holds {sorted(by_name)}"

    # Only the run above the thresholds alerts; nothing else in the data is alarming.
    assert set(by_name) == wanted, sorted(by_name)
    assert len(held) == 2
    expected_kl = _kl_k3(HIGH_SHIFT)
    assert expected_kl > alerts.KL_K3_CRITICAL > _kl_k3(LOW_SHIFT)
    # The critical alert is routed to its receiver and inhibits the warning of its run.
    for name, severity, receiver, state in [
        ("RLTrainInferKLHigh", "warning", "rltel-default", "suppressed"),
        ("RLTrainInferKLCritical", "critical", "rltel-critical", "active"),
    ]:
        alert = by_name[name]
        labels = alert["labels"]
        assert labels["trial"] == "high" and labels["experiment"] == "exp"
        assert labels["severity"] == severity and labels["family"] == "kl"
        assert labels["job"] == "rltel-trainer" and labels["instance"] == "node0:rank0"
        assert labels["role"] == "trainer"
        assert alert["status"]["state"] == state
        assert [r["name"] for r in alert["receivers"]] == [receiver]
        value = float(re.search(r"kl_k3 = (\S+):", alert["annotations"]["description"])[1])
        assert math.isclose(value, expected_kl, rel_tol=1e-9), (value, expected_kl)
        assert alert["annotations"]["summary"].endswith("(exp/high)")
    inhibitors = by_name["RLTrainInferKLHigh"]["status"]["inhibitedBy"]
    assert inhibitors == [by_name["RLTrainInferKLCritical"]["fingerprint"]]
    assert time.monotonic() - started < DEADLINE_S


def _user_points(shift: float) -> Stats:
    """One training step of the real producers (without a transport's health points)."""
    return Stats(p for p in produced_points(shift) if not p.metric.startswith("rltel/otlp/"))


def _wait_for_series(prometheus: str, expr: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not servers.api(prometheus, "query", query=expr)["result"]:
        assert time.monotonic() < deadline, f"Prometheus has no {expr} after {timeout_s} s"
        time.sleep(0.2)


def _collector(tmp_path: Path) -> CollectorServer:
    config = from_dict(
        {
            "receiver": {"host": "127.0.0.1", "port": 0},
            "sinks": {
                "fileroot": str(tmp_path / "runs"),
                "prometheus": {"enabled": True, "host": "127.0.0.1", "port": 0},
            },
        }
    )
    server = CollectorServer(config)
    server.start()
    return server


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_critical_kl_alert_reaches_the_webhook_within_30s(tmp_path, webhook):
    shipped = yaml.safe_load(servers.PROMETHEUS_YML.read_text())
    job = next(j for j in shipped["scrape_configs"] if j["job_name"] == servers.COLLECTOR_JOB)
    scrape_s = int(job["scrape_interval"].removesuffix("s"))
    group = next(g for g in alerts.alert_rules()["groups"] if g["name"] == "rltel-rl-health")
    critical = next(r for r in group["rules"] if r["alert"] == "RLTrainInferKLCritical")
    assert critical["for"] == "0s" and group["interval"] == alerts.RL_HEALTH_INTERVAL == "10s"
    assert scrape_s <= 5

    collector = _collector(tmp_path)
    stats = None
    try:
        with servers.alertmanager(tmp_path, webhook.url) as alertmanager:
            target = f"127.0.0.1:{collector.prometheus.port}"
            config = servers.prometheus_config(target, alertmanager, build.ALERTS_PATH, False)
            with servers.prometheus(tmp_path, config) as prometheus:
                stats = StatsLogger(
                    {
                        "experiment_name": "exp",
                        "trial_name": "latency",
                        "fileroot": str(tmp_path / "runs"),
                        "otlp": {"endpoint": collector.endpoint, "timeout": 2.0},
                    }
                )
                stats.commit(0, 0, 0, _user_points(LOW_SHIFT))  # a healthy step first
                kl = alerts.c.KL_K3.stat("avg")
                _wait_for_series(prometheus, f'{kl}{{trial="latency"}}', 30)
                time.sleep(scrape_s)  # scraped and evaluated while healthy: nothing fires
                assert webhook.notifications() == []
                committed = time.monotonic()
                stats.commit(0, 1, 1, _user_points(HIGH_SHIFT))  # crosses KL_K3_CRITICAL
                arrived = _wait_for_alert(webhook, "RLTrainInferKLCritical", DEADLINE_S)
    finally:
        if stats is not None:
            stats.close(5)
        collector.stop(10)
    latency = arrived.received - committed
    print(f"commit -> webhook latency of RLTrainInferKLCritical: {latency:.1f} s")
    assert latency <= LATENCY_BUDGET_S, latency
    (alert,) = [a for a in arrived.alerts() if a["labels"]["alertname"] == "RLTrainInferKLCritical"]
    assert alert["status"] == "firing"
    assert alert["labels"]["trial"] == "latency" and alert["labels"]["severity"] == "critical"
    assert arrived.payload["receiver"] == "rltel-critical"
    # the warning waits out its 10m hold-down; nothing else fired
    names = {a["labels"]["alertname"] for n in webhook.notifications() for a in n.alerts()}
    assert names == {"RLTrainInferKLCritical"}


def _wait_for_alert(webhook: WebhookReceiver, name: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for notification in webhook.notifications():
            if any(a["labels"]["alertname"] == name for a in notification.alerts()):
                return notification
        time.sleep(0.05)
    raise AssertionError(f"no {name} at the webhook within {timeout_s} s")
