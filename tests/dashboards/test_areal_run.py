"""The RL health board and the RL alert rules on what AReaL's own PPO actor records.

Four runs (:mod:`tests.dashboards.areal_run`) commit :data:`STEPS` steps each through real
StatsLoggers with the Prometheus sink on (the embedded default); after each step each
logger's exposition is published on a :class:`~tests.dashboards.servers.FrozenTarget` of
its own and a real Prometheus scrapes them. Then, at the last scrape, with
``$__rate_interval`` and ``$__interval`` the span back to the last scrape that showed the
step before (the window holds one step exactly):

- every target of every RL-health panel, run as Grafana runs it for the AReaL run, holds that
  run's one series at the value of its reference: numpy from the batch's tensors for rltel's
  producers, AReaL's own tracker on the same batch for what AReaL computes;
- the policy-loss panel shows, per run, AReaL's ``actor_loss`` for the AReaL runs (also the
  one whose loop records ``loss`` too: never both) and the loop's ``loss`` for the loop;
- every rule of the RL-health group fires on the sick AReaL run and on no other, and every
  series a progress rule reads has the AReaL run's series.

A panel or rule listed in :data:`NOT_ON_AREAL` has nothing to read on an AReaL run; the test
asserts that it stays empty there (so a fix shows up here) and says why.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from dashboards import alerts, build
from dashboards import catalog as c
from rltel.logger import StatsLogger
from telemetry.metrics.train_infer import DEFAULT_LOGP_DIFF_BOUNDS
from telemetry.metrics.train_infer_states import TAIL_THRESHOLDS
from telemetry.record import export as rltel_export
from tests.dashboards import servers
from tests.dashboards.areal_run import (
    AREAL,
    BOTH,
    LOOP,
    RUNS,
    SICK,
    Recorder,
    areal_reference,
    batch,
    loop_loss,
)
from tests.dashboards.grafana_vars import interpolate
from tests.dashboards.test_dashboards import metric_names

EXPERIMENT = "areal-ppo"
STEPS = 2
BOARD = json.loads((build.GRAFANA_DIR / "rl_health.json").read_text())
VARIABLES = BOARD["templating"]["list"]
TARGETS = {
    (panel["title"], target["refId"]): target["expr"]
    for panel in BOARD["panels"]
    for target in panel.get("targets", [])
}
RL_GROUPS = ("rltel-rl-health", "rltel-rl-progress")
RULES = {
    rule["alert"]: (group["name"], rule["expr"])
    for group in alerts.alert_rules()["groups"]
    if group["name"] in RL_GROUPS
    for rule in group["rules"]
}
NOT_ON_AREAL = {
    ("Stale / future token fractions", "A"): "stale_token_fraction is rltel's "
    "record_version_stats only; AReaL's actor records its own version_stats keys in "
    "ppo_actor/update, which refuses rltel's producer there (one writer per key)",
    ("Stale / future token fractions", "B"): "as A: future_token_fraction",
    "RLFutureTokens": "future_token_fraction, as the panel above",
}


# -- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scraped:
    """A Prometheus holding the runs' steps; where and over what window to evaluate."""

    prometheus: str
    time_ms: int
    span_ms: int


def _publish(logger: StatsLogger, target: servers.FrozenTarget) -> None:
    """Serve the logger's exposition as it is now, and wait until a scrape read it."""
    assert logger.fanout.force_flush(10)
    url = logger.prometheus_url
    assert url is not None
    target.publish(servers.get(url, timeout=10), "text/plain; version=0.0.4; charset=utf-8")
    target.wait_scraped()


def _scrape_times(prometheus: str, instance: str) -> dict[int, int]:
    """Each scrape's time (ms) of the AReaL run's target -> the step it showed (-1: none)."""
    run = f'experiment="{EXPERIMENT}", trial="{AREAL}"'
    steps = servers.api(prometheus, "query", query=f"{c.STEP.name}{{{run}}}[10m]")["result"]
    shown = {round(t * 1000): int(float(v)) for t, v in steps[0]["values"]} if steps else {}
    (up,) = servers.api(prometheus, "query", query=f'up{{instance="{instance}"}}[10m]')["result"]
    return {round(t * 1000): shown.get(round(t * 1000), -1) for t, _ in up["values"]}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[Scraped]:
    """Each run a StatsLogger with its embedded Prometheus endpoint (the default sink), its
    expositions served step by step on a FrozenTarget of its own, one Prometheus scraping
    the four every second."""
    tmp = tmp_path_factory.mktemp("areal")
    rules = tmp / "rules.yml"
    rules.write_text("groups: []\n")
    with ExitStack() as stack, pytest.MonkeyPatch.context() as patch:
        patch.setattr(rltel_export, "_sources", [])  # no producer of another test joins in
        loggers, targets = {}, {}
        for run in RUNS:
            targets[run] = stack.enter_context(servers.FrozenTarget())
            loggers[run] = StatsLogger(
                {
                    "experiment_name": EXPERIMENT,
                    "trial_name": run,
                    "fileroot": str(tmp / "logger"),
                    "console": {"enabled": False},
                    "prometheus": {"enabled": True, "port": 0},
                    "heartbeat": {"enabled": False},
                }
            )
            stack.callback(loggers[run].close, 10)
            targets[run].publish(b"", "text/plain; version=0.0.4; charset=utf-8")  # no step yet
        config = servers.prometheus_config(targets[AREAL].address, None, rules, fast=True)
        job = config["scrape_configs"][0]["static_configs"][0]
        job["targets"] = [targets[run].address for run in RUNS]
        prometheus = stack.enter_context(servers.prometheus(tmp, config))
        for target in targets.values():
            target.wait_scraped(30)
        recorder = Recorder.start()
        for step in range(STEPS):
            for run in RUNS:
                loggers[run].commit(0, step, step, recorder.step(run, step))
            for run in RUNS:
                _publish(loggers[run], targets[run])
        for run in RUNS:  # a later scrape is stored only once this one is
            _publish(loggers[run], targets[run])
        scrapes = _scrape_times(prometheus, targets[AREAL].address)
        end = max(t for t, shown in scrapes.items() if shown == STEPS - 1)
        start = max(t for t, shown in scrapes.items() if shown == STEPS - 2)
        yield Scraped(prometheus, end, end - start)


def _query(scraped: Scraped, expr: str) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "time": f"{scraped.time_ms / 1000:.3f}"})
    body = json.loads(servers.get(f"{scraped.prometheus}/api/v1/query?{params}", timeout=10))
    assert body["status"] == "success" and not body.get("warnings"), (expr, body)
    return body["data"]["result"]


def _panel(scraped: Scraped, key: tuple[str, str], trial: str) -> list[dict]:
    """The panel target ``key`` as Grafana runs it with the run ``trial`` chosen."""
    builtins = {"__rate_interval": f"{scraped.span_ms}ms", "__interval": f"{scraped.span_ms}ms"}
    chosen = {"experiment": [EXPERIMENT], "trial": [trial]}
    return _query(scraped, interpolate(TARGETS[key], VARIABLES, chosen, builtins))


# -- references --------------------------------------------------------------------------------

Reference = Callable[[], dict[str, float]]
"""The values a target shows for the AReaL run at the last step, by ``le`` ("" if none)."""


def _last_batch() -> dict[str, torch.Tensor]:
    return batch(STEPS - 1)


def _d() -> np.ndarray:
    """d = log p_trainer - log p_rollout on the valid tokens (the loss mask)."""
    data = _last_batch()
    mask = data["loss_mask"].bool().numpy()
    d = (data["forward_logp"].double() - data["logprobs"].double()).numpy()[mask]
    assert np.isfinite(d).all()
    return d


def _one(value: Callable[[], float]) -> Reference:
    return lambda: {"": float(value())}


def _advantages() -> np.ndarray:
    data = _last_batch()
    return data["advantages"].numpy()[data["loss_mask"].bool().numpy()]


def _buckets() -> dict[str, float]:
    d = _d()
    return {str(float(le)): float((d <= le).sum()) for le in (*DEFAULT_LOGP_DIFF_BOUNDS, math.inf)}


def _areal(key: str) -> Reference:
    return _one(lambda: areal_reference(_last_batch())[key])


def _k3() -> np.ndarray:
    """k3 = expm1(d) - d per valid token."""
    return np.expm1(_d()) - _d()


def _outside(t: float) -> Reference:
    """The share of valid tokens whose probability ratio is outside [1/t, t]."""
    return _one(lambda: np.mean(np.abs(_d()) > math.log(t)))


REFERENCES: dict[tuple[str, str], Reference] = {
    ("KL estimators (last step)", "A"): _one(lambda: np.mean(-_d())),
    ("KL estimators (last step)", "B"): _one(lambda: np.mean(_d() ** 2 / 2)),
    ("KL estimators (last step)", "C"): _one(lambda: np.mean(_k3())),
    ("KL k3, token-weighted over the rate window", "A"): _one(lambda: np.mean(_k3())),
    ("logp_diff avg / min / max", "A"): _one(lambda: np.mean(_d())),
    ("logp_diff avg / min / max", "B"): _one(lambda: np.min(_d())),
    ("logp_diff avg / min / max", "C"): _one(lambda: np.max(_d())),
    ("logp_diff avg / min / max", "D"): _one(lambda: np.mean(np.abs(_d()))),
    ("logp_diff distribution", "A"): _buckets,
    ("Non-finite and overflow fractions", "A"): _one(lambda: 0.0),
    ("Non-finite and overflow fractions", "B"): _one(lambda: 0.0),
    **{
        ("Probability ratio outside [1/t, t]", ref): _outside(t)
        for ref, t in zip("ABCDE", TAIL_THRESHOLDS, strict=True)
    },
    ("Sample staleness (versions)", "A"): _areal(
        "ppo_actor/update/version_stats/sample_staleness_theta_avg"
    ),
    ("Sample staleness (versions)", "B"): _areal(
        "ppo_actor/update/version_stats/sample_staleness_theta_min"
    ),
    ("Sample staleness (versions)", "C"): _areal(
        "ppo_actor/update/version_stats/sample_staleness_theta_max"
    ),
    ("Sample staleness (versions)", "D"): _areal(
        "ppo_actor/update/version_stats/sample_staleness_proximal_avg"
    ),
    ("Policy loss avg / min / max", "A"): _areal("ppo_actor/update/actor_loss/avg"),
    ("Policy loss avg / min / max", "B"): _areal("ppo_actor/update/actor_loss/min"),
    ("Policy loss avg / min / max", "C"): _areal("ppo_actor/update/actor_loss/max"),
    ("Advantage sign fractions (tokens)", "A"): _one(lambda: np.mean(_advantages() > 0)),
    ("Advantage sign fractions (tokens)", "B"): _one(lambda: np.mean(_advantages() < 0)),
    ("Advantage sign fractions (tokens)", "C"): _one(lambda: np.mean(_advantages() == 0)),
}
AREAL_REL = 1e-6
"""AReaL's tracker sums in float32, rltel's in float64 (as the conformance cases compare)."""


def _by_le(result: list[dict]) -> dict[str, float]:
    """Each series' value by its ``le`` as a float's text ("" without one)."""
    return {
        str(float(s["metric"]["le"])) if "le" in s["metric"] else "": float(s["value"][1])
        for s in result
    }


def test_every_rl_health_target_is_covered():
    assert set(TARGETS) == set(REFERENCES) | {k for k in NOT_ON_AREAL if isinstance(k, tuple)}


@pytest.mark.parametrize("key", sorted(REFERENCES), ids=lambda k: f"{k[0]}/{k[1]}")
def test_rl_health_target_shows_the_areal_run(scraped, key):
    result = _panel(scraped, key, AREAL)
    assert {s["metric"].get("trial") for s in result} <= {AREAL, None}, result
    got = _by_le(result)
    expected = REFERENCES[key]()
    assert got.keys() == expected.keys(), f"{TARGETS[key]}: {got} != {expected}"
    rel = AREAL_REL if "actor_loss" in TARGETS[key] or "staleness" in TARGETS[key] else 1e-9
    for le, value in expected.items():
        assert math.isclose(got[le], value, rel_tol=rel, abs_tol=1e-12), (key, got, expected)


@pytest.mark.parametrize("key", [k for k in NOT_ON_AREAL if isinstance(k, tuple)])
def test_panel_without_an_areal_producer_stays_empty(scraped, key):
    assert _panel(scraped, key, AREAL) == [], NOT_ON_AREAL[key]


@pytest.mark.parametrize("stat", ["avg", "min", "max"])
def test_policy_loss_is_actor_loss_where_recorded_and_loss_otherwise(scraped, stat):
    ref = "ABC"[("avg", "min", "max").index(stat)]
    key = ("Policy loss avg / min / max", ref)
    for run in (AREAL, BOTH, LOOP):
        (series,) = _panel(scraped, key, run)  # one series: never both keys of a run
        if run == LOOP:
            data = batch(STEPS - 1)
            loss = loop_loss(STEPS - 1).numpy()[data["loss_mask"].bool().numpy()]
            expected, rel = float(getattr(np, {"avg": "mean"}.get(stat, stat))(loss)), 1e-6
        else:
            expected = areal_reference(batch(STEPS - 1))[f"ppo_actor/update/actor_loss/{stat}"]
            rel = AREAL_REL
        assert math.isclose(float(series["value"][1]), expected, rel_tol=rel), (run, series)
    (sick,) = _panel(scraped, key, SICK)
    assert math.isnan(float(sick["value"][1]))


@pytest.mark.parametrize(
    "alert", [a for a, (g, _) in RULES.items() if g == "rltel-rl-health"], ids=str
)
def test_rl_health_rule_fires_on_the_sick_areal_run_only(scraped, alert):
    trials = {s["metric"]["trial"] for s in _query(scraped, RULES[alert][1])}
    if alert in NOT_ON_AREAL:
        assert trials == set(), NOT_ON_AREAL[alert]
    else:
        assert trials == {SICK}, (alert, RULES[alert][1])


PROGRESS_INPUTS = {
    "RLTrainingStalled": {c.STEP.name},  # and rltel_closed, written by close()
    "RLThroughputDrop": {c.TOTAL_TOKENS.name},
    "RLRewardCollapse": {c.ROLLOUT_REWARD.name},
    "RLGradNormSpike": {c.GRAD_NORM.name},
}


@pytest.mark.parametrize("alert", sorted(PROGRESS_INPUTS))
def test_progress_rule_reads_series_of_the_areal_run(scraped, alert):
    group, expr = RULES[alert]
    assert group == "rltel-rl-progress"
    names = metric_names(expr)[0]
    assert names - {c.CLOSED.name} == PROGRESS_INPUTS[alert], names
    for name in PROGRESS_INPUTS[alert]:
        run = f'{name}{{experiment="{EXPERIMENT}", trial="{AREAL}"}}'
        assert len(_query(scraped, run)) == 1, run


def test_every_rl_rule_is_checked():
    health = {a for a, (g, _) in RULES.items() if g == "rltel-rl-health"}
    assert set(RULES) == health | set(PROGRESS_INPUTS)


# -- the sign of the train/infer logp_diff -----------------------------------------------------


def test_train_infer_logp_diff_panel_is_trainer_minus_rollout(scraped):
    """On AReaL's batch, whose trainer log-probs sit above the rollout's, the panel's avg is
    positive: numpy's mean of trainer - rollout, the negative of rollout - trainer."""
    (series,) = _panel(scraped, ("logp_diff avg / min / max", "A"), AREAL)
    data = _last_batch()
    mask = data["loss_mask"].bool()
    trainer, rollout = data["forward_logp"].double()[mask], data["logprobs"].double()[mask]
    trainer_minus_rollout = float((trainer - rollout).mean())
    rollout_minus_trainer = float((rollout - trainer).mean())
    got = float(series["value"][1])
    assert got > 0 > rollout_minus_trainer
    assert math.isclose(got, trainer_minus_rollout, rel_tol=1e-9)
    assert math.isclose(got, -rollout_minus_trainer, rel_tol=1e-9)


def test_every_panel_and_page_with_the_train_infer_logp_diff_says_its_sign():
    """Each panel of every board that reads the train/infer logp_diff, each alert text that
    names it and its docs/metrics.md row say trainer - rollout and that AReaL's own
    logp_diff has the opposite sign."""
    series = c.LOGP_DIFF.name

    def says_sign(text: str) -> bool:
        return "trainer − rollout" in text and "opposite sign" in text

    panels = [
        (name, panel)
        for name in build.BOARDS
        for panel in json.loads((build.GRAFANA_DIR / f"{name}.json").read_text())["panels"]
        if any(series in t["expr"] for t in panel.get("targets", []))
    ]
    assert len(panels) == 2, [p["title"] for _, p in panels]  # the avg/min/max and the heatmap
    for name, panel in panels:
        assert says_sign(panel["title"] + " " + panel["description"]), (name, panel["title"])
    for group in alerts.alert_rules()["groups"]:
        for rule in group["rules"]:
            text = " ".join(rule["annotations"].values())
            if "logp_diff" in text:
                assert says_sign(text), rule["alert"]
    doc = (build.HERE.parent / "docs" / "metrics.md").read_text()
    (row,) = [
        line for line in doc.splitlines() if line.startswith("| `ppo_actor/train_infer/logp_diff/")
    ]
    assert says_sign(row), row
