"""Every dashboard panel's query, run in a real Prometheus, shows what was recorded.

Two runs train for :data:`STEPS` steps with the real producers
(:class:`~tests.dashboards.producers.TrainingRun`) and commit each step through a real
StatsLogger over OTLP to a real collector. After each step the test waits until both
senders and the collector have delivered everything, then publishes the collector's
exposition on a :class:`~tests.dashboards.servers.FrozenTarget` (every scrape sees one
whole step) and waits for a real Prometheus, scraping every second, to read it.

Then every target of every panel of every dashboard runs as Grafana would run it for the
chosen run (variables substituted by :mod:`tests.dashboards.grafana_vars`) at the times
of several scrapes, with ``$__rate_interval`` four scrape intervals long as Grafana makes
it: the measured span of the last four scrapes, so that the window starts and ends on a
sample (Prometheus 2 ranges hold both ends). Prometheus extrapolates nothing then:
``increase()`` is the difference of those two samples and ``rate()`` that per second.
Each result must hold exactly the series of its reference
(:mod:`tests.dashboards.references`, numpy from the recorded inputs) with the same
values: no empty panel, no error, no other run's series.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from collector.config import from_dict
from collector.server import CollectorServer
from dashboards import build
from dashboards import catalog as c
from rltel.logger import StatsLogger
from tests.dashboards import servers
from tests.dashboards.engine_references import ENGINE_REFERENCES, EngineRun, engine_runs
from tests.dashboards.grafana_vars import interpolate, label_values_query
from tests.dashboards.producers import StepInputs, TrainingRun
from tests.dashboards.references import (
    CHOSEN,
    DECOY,
    EXPERIMENT,
    LAYER,
    REFERENCES,
    SERIES_LIMIT,
    History,
    Sent,
    Step,
    Window,
)
from tests.dashboards.remote_write_references import (
    LEDGER,
    REMOTE_WRITE_REFERENCES,
    TimedReference,
)
from tests.dashboards.remote_write_references import config as remote_write_config
from tests.exporters.test_remote_write import Receiver

STEPS = 10
RATE_SCRAPES = 4
"""Grafana's ``$__rate_interval``: 4 scrape intervals (more only for long time ranges)."""
REFERENCES = {**REFERENCES, **ENGINE_REFERENCES, **REMOTE_WRITE_REFERENCES}
CHOSEN_VALUES = {"experiment": [EXPERIMENT], "trial": [CHOSEN], "layer": [str(LAYER)]}
BOARDS = {n: json.loads((build.GRAFANA_DIR / f"{n}.json").read_text()) for n in build.BOARDS}
VARIABLES = {name: board["templating"]["list"] for name, board in BOARDS.items()}
# Panels whose inputs are not a trainer's steps, each checked by a test of its own.
ELSEWHERE = {
    ("throughput", "Phase latency (spans): mean and p90"): "tests/dashboards/test_span_panel.py",
    ("rl_health", "Policy loss avg / min / max"): "tests/dashboards/test_areal_run.py",
}
TARGETS = [
    (name, panel, target)
    for name, board in BOARDS.items()
    for panel in board["panels"]
    for target in panel.get("targets", [])
    if (name, panel["title"]) not in ELSEWHERE
]


def _inputs(step: int, decoy: bool) -> StepInputs:
    """One step of a 4 x 12 batch, behaviour versions ahead of the trainer at steps 2 and 6;
    the decoy has a NaN logprob on a valid token at step 3."""
    gen = torch.Generator().manual_seed(2 * step + decoy)
    rows, width = 4, 12
    lengths = torch.randint(3, width + 1, (rows,), generator=gen)
    mask = torch.arange(width) < lengths[:, None]
    rollout = -3 * torch.rand(rows, width, generator=gen, dtype=torch.float64) - 0.01
    noise = 0.4 * torch.randn(rows, width, generator=gen, dtype=torch.float64)
    trainer = (rollout + 0.05 * (1 + step % 3) * (1 + decoy) + noise).clamp(max=0.0)
    if step == 3 and decoy:
        rollout[0, 0] = math.nan
    advantages = torch.randn(rows, width, generator=gen).round(decimals=1)
    advantages[:, 0] = 0.0
    version = 10 + step
    versions = version - torch.randint(0, 6, (rows, width), generator=gen)
    versions[1, 1] = -1
    if step % 4 == 2:
        versions[2, 0] = version + 1
    routing = {
        layer: (torch.randint(0, 4, (8 + 4 * layer,), generator=gen).tolist(), 4)
        for layer in (0, 1)
    }
    batch_ms = tuple(125.0 * int(n) for n in torch.randint(1, 9, (2,), generator=gen))
    noise_series = SERIES_LIMIT + 8 if decoy else 0
    gpu = {  # NVML-shaped readings of rank 0's GPU; the decoy's differ
        "utilization_percent": 40.0 + 5 * step + 3 * decoy,
        "memory_used_bytes": float((20 + step + decoy) * 2**30),
        "memory_free_ratio": 0.5 - 0.04 * step - 0.01 * decoy,
        "power_watts": 300.0 + 12.5 * step + decoy,
        "temperature_celsius": 55.0 + step + 2 * decoy,
        "sm_clock_mhz": 1980.0 - 15 * step - decoy,
        "throttle_thermal": float((step + decoy) % 3 == 2),
        "throttle_power": float((step + decoy) % 4 == 1),
    }
    return StepInputs(
        trainer, rollout, mask, advantages, versions, version, batch_ms, routing, noise_series, gpu
    )


def _collector(tmp: Path, receiver: Receiver) -> CollectorServer:
    prometheus = {"enabled": True, "host": "127.0.0.1", "port": 0, "series_limit": SERIES_LIMIT}
    sinks = {
        "fileroot": str(tmp / "runs"),
        "prometheus": prometheus,
        "remote_write": remote_write_config(receiver),
    }
    config = from_dict({"receiver": {"host": "127.0.0.1", "port": 0}, "sinks": sinks})
    server = CollectorServer(config)
    server.start()
    return server


def _exposition(url: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read(), response.headers["Content-Type"]


def _sent(logger: StatsLogger) -> Sent:
    """The sender's health; its job and instance labels as the sink makes them."""
    health = logger.health()["otlp"]
    resource = dict(logger.resource)
    return Sent(
        job=resource["service.name"],
        instance=f"{resource['host.name']}:rank{resource['rltel.rank']}",
        requests=int(health["requests_exported"]),
        points=int(health["points_exported"]),
        latency=health["last_export_latency_s"],
    )


def _send_steps(
    collector: CollectorServer,
    target: servers.FrozenTarget,
    loggers: dict[str, StatsLogger],
    engines: list[EngineRun],
) -> History:
    """Commit :data:`STEPS` steps of every run; each one delivered, published and scraped
    (each run's rollout engine scraped into the collector at each step too)."""
    runs = {trial: TrainingRun() for trial in loggers}
    history: list[Step] = []
    for step in range(STEPS):
        inputs = {trial: _inputs(step, trial == DECOY) for trial in loggers}
        exported = {trial: run.step(inputs[trial]) for trial, run in runs.items()}
        for trial, logger in loggers.items():
            logger.commit(0, step, step, exported[trial])
        for logger in loggers.values():
            assert logger.fanout.force_flush(10)
        for engine in engines:
            engine.advance(step)
        assert collector.pipeline.force_flush(10)  # the remote writes too: all counted
        timeperf = exported[CHOSEN]["timeperf/train_step"]
        peak_rss = exported[CHOSEN]["hardware/memory/peak_rss_bytes/rank_0/per_rank"]
        sent = tuple(_sent(lg) for lg in loggers.values())
        history.append(Step(inputs, timeperf, peak_rss, sent))
        exposition = _exposition(collector.metrics_url)
        LEDGER.record(exposition[0])
        target.publish(*exposition)
        target.wait_scraped()
    # A later scrape starts only once the previous one is stored: the last step is in.
    target.publish(*_exposition(collector.metrics_url))
    target.wait_scraped()
    return tuple(history)


@dataclass(frozen=True)
class Evaluation:
    """Where a query is evaluated: a scrape's time, the rate window ending there."""

    time_ms: int
    span_ms: int
    window: Window


@dataclass(frozen=True)
class Scraped:
    """A Prometheus that scraped the steps, what they sent, where to evaluate queries."""

    prometheus: str
    history: History = field(repr=False)
    evaluations: list[Evaluation] = field(repr=False)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _evaluations(prometheus: str, history: History) -> list[Evaluation]:
    """Each scrape that ends :data:`RATE_SCRAPES` intervals holding a step, from one that
    showed a step (every series exists there: the window starts on a sample of each)."""
    run = f'experiment="{EXPERIMENT}", trial="{CHOSEN}"'
    (steps,) = servers.api(prometheus, "query", query=f"{c.STEP.name}{{{run}}}[10m]")["result"]
    shown = {_ms(t): int(float(v)) + 1 for t, v in steps["values"]}
    (up,) = servers.api(prometheus, "query", query=f'up{{job="{servers.COLLECTOR_JOB}"}}[10m]')[
        "result"
    ]
    scrapes = [(_ms(t), history[: shown.get(_ms(t), 0)]) for t, _ in up["values"]]
    assert shown and max(shown.values()) == len(history), "the last step was not scraped"
    evaluations = []
    for (start_ms, start), (end_ms, end) in zip(scrapes, scrapes[RATE_SCRAPES:]):
        if len(start) >= 1 and len(end) > len(start):
            window = Window(start, end, (end_ms - start_ms) / 1000)
            evaluations.append(Evaluation(end_ms, end_ms - start_ms, window))
    assert len(evaluations) >= 3, f"only {len(evaluations)} windows in {len(scrapes)} scrapes"
    return evaluations


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[Scraped]:
    tmp = tmp_path_factory.mktemp("panels")
    rules = tmp / "rules.yml"
    rules.write_text("groups: []\n")
    with ExitStack() as stack:
        target = stack.enter_context(servers.FrozenTarget())
        LEDGER.instance = target.address
        receiver = Receiver([204])
        stack.callback(receiver.close)
        collector = _collector(tmp, receiver)
        stack.callback(collector.stop, 10)
        engines = engine_runs(collector)
        for engine in engines:
            stack.callback(engine.close)
        loggers = {}
        for trial in (CHOSEN, DECOY):
            loggers[trial] = StatsLogger(
                {
                    "experiment_name": EXPERIMENT,
                    "trial_name": trial,
                    "fileroot": str(tmp / "logger"),
                    "otlp": {"endpoint": collector.endpoint},
                    # the references count the senders' data requests; the heartbeat's own
                    # requests (rank 0's beats, tests/collector/test_heartbeat*) are not in them
                    "heartbeat": {"enabled": False},
                }
            )
            stack.callback(loggers[trial].close, 10)
        target.publish(*_exposition(collector.metrics_url))  # before any step
        config = servers.prometheus_config(target.address, None, rules, fast=True)
        prometheus = stack.enter_context(servers.prometheus(tmp, config))
        target.wait_scraped(30)
        history = _send_steps(collector, target, loggers, engines)
        yield Scraped(prometheus, history, _evaluations(prometheus, history))


def _query(prometheus: str, expr: str, time_ms: int) -> list[dict]:
    """An instant query's vector; fails on an error or a warning."""
    params = urllib.parse.urlencode({"query": expr, "time": f"{time_ms / 1000:.3f}"})
    try:
        body = json.loads(servers.get(f"{prometheus}/api/v1/query?{params}", timeout=10))
    except urllib.error.HTTPError as exc:
        pytest.fail(f"{expr}: {exc.read().decode()}")
    assert body["status"] == "success" and not body.get("warnings"), (expr, body)
    assert body["data"]["resultType"] == "vector", (expr, body)
    return body["data"]["result"]


def _series(result: list[dict], by: tuple[str, ...]) -> dict[tuple, float]:
    """Each series' value by its label values (``le`` as a number)."""
    out: dict[tuple, float] = {}
    for series in result:
        labels = series["metric"]
        key = tuple(float(labels[n]) if n == "le" else labels.get(n) for n in by)
        assert key not in out, f"two series {dict(zip(by, key))}: {result}"
        out[key] = float(series["value"][1])
    return out


def _same(got: float, expected: float) -> bool:
    if math.isnan(expected):
        return math.isnan(got)
    return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12)


def test_every_panel_target_has_a_reference():
    assert {(name, panel["title"], t["refId"]) for name, panel, t in TARGETS} == set(REFERENCES)


@pytest.mark.parametrize(
    ("name", "panel", "target"),
    TARGETS,
    ids=[f"{name}/{panel['title']}/{t['refId']}" for name, panel, t in TARGETS],
)
def test_panel_target_shows_the_reference(scraped, name, panel, target):
    reference = REFERENCES[(name, panel["title"], target["refId"])]
    variables = VARIABLES[name]
    for evaluation in scraped.evaluations:
        # $__interval is the step of Grafana's range query: a histogram heatmap's window
        # equals it, so the cells of consecutive steps tile time; here the step is the window
        builtins = {
            "__rate_interval": f"{evaluation.span_ms}ms",
            "__interval": f"{evaluation.span_ms}ms",
        }
        expr = interpolate(target["expr"], variables, CHOSEN_VALUES, builtins)
        got = _series(_query(scraped.prometheus, expr, evaluation.time_ms), reference.by)
        if isinstance(reference, TimedReference):
            expected = reference.values(evaluation.window, evaluation.time_ms)
        else:
            expected = reference.values(evaluation.window)
        where = f"{expr!r} at step {len(evaluation.window.end) - 1}"
        assert expected, f"no reference series for {where}"
        assert got.keys() == expected.keys(), f"{where}: {got} != {expected}"
        for key, value in expected.items():
            assert _same(got[key], value), f"{where}, {key}: {got[key]!r} != {value!r}"


@pytest.mark.parametrize(
    "name", [n for n, b in BOARDS.items() if any(v["type"] == "query" for v in VARIABLES[n])]
)
def test_variables_offer_the_runs_and_layers(scraped, name):
    """Each query variable, resolved as Grafana does with the ones before it chosen."""
    variables = VARIABLES[name]
    chosen_run = scraped.history[-1].inputs[CHOSEN]
    expected = {
        "experiment": {EXPERIMENT},
        "trial": {CHOSEN, DECOY},
        "layer": {str(layer) for layer in chosen_run.routing},
    }
    for variable in variables:
        if variable["type"] != "query":
            continue
        definition = interpolate(variable["query"]["query"], variables, CHOSEN_VALUES, {})
        selector, label = label_values_query(definition)
        options = servers.api(scraped.prometheus, f"label/{label}/values", **{"match[]": selector})
        assert set(options) == expected[variable["name"]], (definition, options)
