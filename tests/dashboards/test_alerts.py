"""Alert rules: promtool check + promtool unit tests, coverage, and that the tests can fail."""

from __future__ import annotations

import re
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


def test_stack_doc_table_lists_every_alert():
    readme = (PROM_DIR.parents[1] / "docs" / "stack.md").read_text()
    table = readme[readme.index("| Alert | Fires when |") :]
    table = table[: table.index("\n\n")]
    listed = set(re.findall(r"\b(?:RL|MoE|Rltel|RolloutEngine)[A-Za-z]+", table))
    assert listed == {rule["alert"] for rule in _rules(yaml.safe_load(RULES.read_text()))}


def test_rules_are_labelled_and_documented():
    for rule in _rules(yaml.safe_load(RULES.read_text())):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["labels"]["family"] in (
            "kl",
            "staleness",
            "training",
            "progress",
            "reward",
            "moe",
            "pipeline",
            "engines",
        ), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


THRESHOLDS = {
    "KL_K3_WARNING": "RLTrainInferKLHigh",
    "KL_K3_CRITICAL": "RLTrainInferKLCritical",
    "STALENESS_WARNING": "RLSampleStalenessHigh",
    "MAX_OVER_IDEAL_WARNING": "MoEExpertImbalance",
    "MAX_OVER_IDEAL_CRITICAL": "MoEExpertImbalanceCritical",
    "THROUGHPUT_DROP_RATIO": "RLThroughputDrop",
    "REWARD_DROP_FRACTION": "RLRewardCollapse",
    "GRAD_NORM_SPIKE_FACTOR": "RLGradNormSpike",
    "STALL_AFTER": "RLTrainingStalled",
    "KV_CACHE_FULL": "RolloutEngineKVCacheFull",
    "WAITING_GROWING": "RolloutEngineWaitingGrowing",
    "ENGINE_THROUGHPUT_DROP_RATIO": "RolloutEngineThroughputDrop",
}
"""Threshold constant -> the alert whose promtool tests pin it (at: fires, just short: quiet)."""
MOVED = {"STALL_AFTER": ("10m30s", "9m30s")}
"""Durations move by one evaluation of their group; numbers by 0.4% either way."""


def _without_annotations(tmp_path: Path, alert: str | None = None) -> Path:
    """Rules and tests as generated now, annotations dropped: only firing decides.

    Args:
        alert: keep only the test groups that check this alert (faster).
    """
    rules = yaml.safe_load(build.rendered()[build.ALERTS_PATH])
    for rule in _rules(rules):
        rule.pop("annotations")
    tests = yaml.safe_load(TESTS.read_text())
    if alert is not None:
        tests["tests"] = [
            test
            for test in tests["tests"]
            if any(case["alertname"] == alert for case in test["alert_rule_test"])
        ]
    for test in tests["tests"]:
        for case in test["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                alert.pop("exp_annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests))
    return path


def test_threshold_pins_pass_unchanged(tmp_path):
    result = _promtool("test", "rules", str(_without_annotations(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("direction", [0, 1], ids=["raised", "lowered"])
@pytest.mark.parametrize("attribute", sorted(THRESHOLDS))
def test_unit_tests_catch_a_moved_threshold(tmp_path, monkeypatch, attribute, direction):
    """Moving a threshold a little either way breaks its "at" or its "just short" case."""
    value = getattr(alerts, attribute)
    moved = MOVED[attribute][direction] if attribute in MOVED else value * (1.004, 0.996)[direction]
    monkeypatch.setattr(alerts, attribute, moved)
    alert = THRESHOLDS[attribute]
    result = _promtool("test", "rules", str(_without_annotations(tmp_path, alert)))
    assert result.returncode != 0
    assert f"alertname: {alert}," in result.stdout + result.stderr
