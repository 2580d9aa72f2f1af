"""Alert rules: promtool check + promtool unit tests, coverage, and that the tests can fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards import alerts, build

PROM_DIR = Path(build.ALERTS_PATH).parent
RULES = PROM_DIR / "alerts.yml"
TESTS = PROM_DIR / "alerts_test.yml"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def _rules(document: dict) -> list[dict]:
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_rules_pass_promtool_check():
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    count = len(_rules(yaml.safe_load(RULES.read_text())))
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_committed_rules_are_the_generated_ones():
    assert RULES.read_text() == build.rendered()[build.ALERTS_PATH]


def test_promtool_unit_tests_pass():
    result = _promtool("test", "rules", str(TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_quiet():
    names = {rule["alert"] for rule in _rules(yaml.safe_load(RULES.read_text()))}
    cases = [
        case
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert firing == names
    assert quiet == names


def test_rules_are_labelled_and_documented():
    for rule in _rules(yaml.safe_load(RULES.read_text())):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["labels"]["family"] in ("kl", "staleness", "moe", "pipeline"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.parametrize(
    ("alert", "attribute", "value"),
    [
        ("RLTrainInferKLHigh", "KL_K3_WARNING", 0.05),
        ("RLSampleStalenessHigh", "STALENESS_WARNING", 6.0),
        ("MoEExpertImbalanceCritical", "MAX_OVER_IDEAL_CRITICAL", 6.0),
    ],
)
def test_unit_tests_catch_a_changed_threshold(tmp_path, monkeypatch, alert, attribute, value):
    """The promtool tests pin thresholds: moving one makes them fail on that alert."""
    monkeypatch.setattr(alerts, attribute, value)
    (tmp_path / "alerts.yml").write_text(build.rendered()[build.ALERTS_PATH])
    (tmp_path / "alerts_test.yml").write_text(TESTS.read_text())
    result = _promtool("test", "rules", str(tmp_path / "alerts_test.yml"))
    assert result.returncode != 0
    assert f"alertname: {alert}," in result.stdout + result.stderr
