"""A NaN loss, an infinite KL k3 and a NaN grad_norm reach Prometheus through the collector
as they do embedded, and the NotFinite alerts fire on that step and resolve after it.

One trainer's steps are recorded with ``stats_tracker`` (a NaN or an inf on a valid token,
a NaN ``scalar``) and each export is committed to two StatsLoggers: one with the embedded
Prometheus sink, one sending OTLP over real gRPC to an in-process collector. After every
step the two ``/metrics`` expositions hold the same samples (NaN and inf included, the
cumulative ``_count``/``_sum``/``_bucket`` unpoisoned after the bad step); the collector's
values per step then go to ``promtool test rules`` with the rules of ``alerts.yml``.
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from rltel.logger import StatsLogger
from telemetry import stats_tracker

from .conftest import samples, scrape

RULES = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus" / "alerts.yml"
ALERTS = {
    "RLLossNotFinite": "ppo_actor_update_loss_avg",
    "RLTrainInferKLNotFinite": "ppo_actor_train_infer_kl_k3_avg",
    "RLGradNormNotFinite": "ppo_actor_update_grad_norm",
}
"""The alerts under test and the series each reads here (a run without actor_loss)."""
BAD_STEP = 2
STEPS = 4
RUN = {"experiment_name": "e", "trial_name": "t", "console": {"enabled": False}}


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _record(step: int) -> dict:
    """One step's export: on ``BAD_STEP`` one valid token's loss is NaN, one's KL k3 +inf
    and grad_norm NaN; padding holds a NaN every step (ignored by the mask)."""
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1, 3] = False
    loss = torch.linspace(0.1, 0.8, 8).reshape(2, 4) * step
    kl = torch.full((2, 4), 0.01 * step)
    loss[1, 3] = math.nan
    grad_norm = 1.0 + step
    if step == BAD_STEP:
        loss[0, 1], kl[1, 0], grad_norm = math.nan, math.inf, math.nan
    with stats_tracker.scope("ppo_actor"):
        with stats_tracker.scope("update"):
            stats_tracker.denominator(n_valid_tokens=mask)
            stats_tracker.stat(loss=loss, denominator="n_valid_tokens")
            stats_tracker.scalar(grad_norm=grad_norm)
        with stats_tracker.scope("train_infer"):
            stats_tracker.denominator(n_valid_tokens=mask)
            stats_tracker.stat(kl_k3=kl, denominator="n_valid_tokens")
    return stats_tracker.export_all()


def _run_samples(url: str) -> dict[tuple, str]:
    """The run's samples (``ppo_actor_*`` and the sink's ``nonfinite_windows``), labels
    without ``job``/``instance`` (the sender's names), values as text (NaN compares)."""
    out = {}
    for (name, labels), value in scrape(url).items():
        if name.startswith("ppo_actor_") or name == "rltel_prometheus_nonfinite_windows_total":
            kept = tuple((k, v) for k, v in labels if k not in ("job", "instance"))
            out[(name, kept)] = repr(value)
    return out


def _promtool_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    return repr(value)


def _promtool(tmp_path: Path, series: dict[str, tuple[dict, list[float]]]) -> str:
    """``promtool test rules`` of the alerts under test over ``series`` (one value a
    minute, step 1 at 0m): each fires exactly at the bad step; the output on failure."""
    rules = yaml.safe_load(RULES.read_text())
    kept = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") in ALERTS]
    assert {r["alert"] for r in kept} == set(ALERTS)
    for rule in kept:
        rule.pop("annotations", None)  # only firing decides
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "nf", "rules": kept}]}))
    input_series = [
        {
            "series": name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
            "values": " ".join(_promtool_value(v) for v in values),
        }
        for name, (labels, values) in series.items()
    ]
    cases = []
    for rule in kept:
        labels, _ = series[ALERTS[rule["alert"]]]
        for step in range(1, STEPS + 1):
            fired = [{"exp_labels": {**labels, **rule["labels"]}}] if step == BAD_STEP else []
            cases.append(
                {"eval_time": f"{step - 1}m", "alertname": rule["alert"], "exp_alerts": fired}
            )
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": cases}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        ["promtool", "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_nonfinite_steps_reach_prometheus_through_the_collector_as_embedded(
    start_collector, tmp_path
):
    server = start_collector(sinks={"fileroot": str(tmp_path / "files")})
    embedded = StatsLogger({**RUN, "prometheus": {"enabled": True, "port": 0}})
    sender = StatsLogger(
        {**RUN, "fileroot": str(tmp_path / "client"), "otlp": {"endpoint": server.endpoint}}
    )
    urls = {"embedded": embedded.prometheus_url, "collector": server.metrics_url}
    series: dict[str, tuple[dict, list[float]]] = {}
    try:
        for step in range(1, STEPS + 1):
            stats = _record(step)
            for logger in (embedded, sender):
                logger.commit(0, step, step, stats)
            for where, url in urls.items():
                _wait(
                    lambda url=url, step=step: step in samples(scrape(url), "rltel_step").values(),
                    f"step {step} did not reach the {where} exposition",
                )
            got = {where: _run_samples(url) for where, url in urls.items()}
            assert got["collector"] == got["embedded"], f"step {step}"
            scraped = scrape(server.metrics_url)
            for name in ALERTS.values():
                ((labels, value),) = samples(scraped, name).items()
                series.setdefault(name, (dict(labels), []))[1].append(value)
            (count,) = samples(scraped, "ppo_actor_update_loss_count").values()
            (total,) = samples(scraped, "ppo_actor_update_loss_sum").values()
            finite = [s for s in range(1, step + 1) if s != BAD_STEP]
            assert count == 7 * len(finite)  # 7 valid tokens a step; the bad step left out
            assert total == pytest.approx(
                sum(s * 0.1 * (1 + 2 + 3 + 4 + 5 + 6 + 7) for s in finite)
            )
        scraped = scrape(server.metrics_url)
        assert sum(samples(scraped, "rltel_collector_points_rejected_total").values()) == 0
        # the loss and KL k3 windows of the bad step, kept out of the cumulative series
        assert samples(scraped, "rltel_prometheus_nonfinite_windows_total") == {(): 2.0}
    finally:
        embedded.close()
        sender.close(30)
    # the bad step's sum, min and max of the loss, sum and max of KL k3, grad_norm
    assert sender.health()["otlp"]["nonfinite_values"] == 6
    losses = series["ppo_actor_update_loss_avg"][1]
    assert [math.isnan(v) for v in losses] == [s == BAD_STEP for s in range(1, STEPS + 1)]
    assert series["ppo_actor_train_infer_kl_k3_avg"][1][BAD_STEP - 1] == math.inf
    failure = _promtool(tmp_path, series)
    assert not failure, failure
