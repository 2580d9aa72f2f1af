"""End to end: producers -> Prometheus sink -> real Prometheus -> real Alertmanager.

A real Prometheus (free loopback port, temp storage, 1 s scrape/evaluation) scrapes the
rltel Prometheus sink, which holds one export of the real producers for two runs: one
whose train/infer KL is above the alert thresholds and one below. It evaluates the
repository's alert rules (only ``for`` and the group interval shortened, so the test
fits in seconds) and sends to a real Alertmanager running the repository's config. The
test reads Alertmanager's ``/api/v2/alerts``. Processes are stopped by PID at the end.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dashboards import alerts, build
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from tests.dashboards.producers import produced_points, snapshot
from tests.distributed import free_port

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 45.0
HIGH_SHIFT, LOW_SHIFT = 0.5, 0.001


def _kl_k3(d: float) -> float:
    """exp(d) - 1 - d, the seed's k3 estimator, for a constant per-token difference d."""
    return math.expm1(d) - d


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read()


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited: {log.read_text()[-2000:]}")
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} not ready in 20 s: {log.read_text()[-2000:]}")


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _fast_rules() -> dict:
    """The repository's rules with ``for`` 0s and a 1 s group interval; exprs unchanged."""
    rules = yaml.safe_load(build.ALERTS_PATH.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule["for"] = "0s"
    return rules


@pytest.fixture
def sink() -> Iterator[PrometheusSink]:
    sink = PrometheusSink(PrometheusConfig(enabled=True, port=0))
    try:
        yield sink
    finally:
        sink.shutdown()


@pytest.fixture
def alertmanager(tmp_path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "alertmanager.log"
    proc = _start(
        [
            "prometheus-alertmanager",
            f"--config.file={ROOT / 'dashboards/alertmanager/alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        log,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url + "/-/ready", proc, log)
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def prometheus(tmp_path, sink, alertmanager) -> Iterator[str]:
    port = free_port()
    rules = tmp_path / "alerts.yml"
    rules.write_text(yaml.safe_dump(_fast_rules()))
    config = yaml.safe_load((ROOT / "dashboards/prometheus/prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(rules)]
    config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [
        alertmanager.removeprefix("http://")
    ]
    collector_job = next(j for j in config["scrape_configs"] if j["job_name"] == "rltel-collector")
    collector_job["static_configs"][0]["targets"] = [f"127.0.0.1:{sink.port}"]
    config["scrape_configs"] = [collector_job]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp_path / "prometheus.log"
    proc = _start(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url + "/-/ready", proc, log)
        yield url
    finally:
        _stop(proc)


def _alerts(alertmanager: str) -> list[dict]:
    return json.loads(_get(alertmanager + "/api/v2/alerts"))


@pytest.mark.timeout(90)
def test_kl_alert_reaches_alertmanager(sink, alertmanager, prometheus):
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
