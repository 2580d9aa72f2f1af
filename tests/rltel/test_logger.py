"""StatsLogger: embedded sinks, OTLP to a real receiver, typed vs plain commits, ranks, outages."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from exporters.base import InMemorySink
from exporters.console import ConsoleSink
from rltel.commit_points import stats_points
from rltel.logger import CLOSED_METRIC, STEP_METRIC, StatsLogger
from telemetry.config import ConfigError
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, StatReduce
from telemetry.record.stats import Stats
from tests.distributed import run_ranks
from tests.telemetry.otlp_receiver import Receiver, metrics_of, resource_of, step_of

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05}
DELTA, CUMULATIVE = 1, 2


def config(tmp_path, endpoint=None, **extra):
    return {
        "experiment_name": "exp",
        "trial_name": "t1",
        "fileroot": str(tmp_path),
        "otlp": {"endpoint": endpoint, "timeout": 2.0},
        **extra,
    }


def user_metrics(request) -> dict:
    return {k: v for k, v in metrics_of(request).items() if not k.startswith("rltel/")}


def test_embedded_default_hands_snapshots_to_sinks(tmp_path):
    sink = InMemorySink()
    stats = StatsLogger(config(tmp_path), sinks=[sink])
    data = {"loss/avg": np.float32(0.5), "reward": 2.0, "reward__count": 8.0, "lr": 1e-5}
    stats.commit(1, 3, 13, data)
    stats.close()
    (snapshot,) = sink.snapshots
    assert sink.shut_down and stats.otlp is None
    assert (snapshot.step.epoch, snapshot.step.epoch_step, snapshot.step.global_step) == (1, 3, 13)
    # no __count; the heartbeat gauge carries the step for Prometheus
    assert snapshot.flat() == {"loss/avg": 0.5, "reward": 2.0, "lr": 1e-5, STEP_METRIC: 13.0}
    assert snapshot.flat(include_counts=True)["reward__count"] == 8.0
    reward = next(p for p in snapshot.points if p.metric == "reward")
    assert isinstance(reward, ScalarMean) and reward.count == 8
    resource = dict(snapshot.resource)
    assert resource["rltel.role"] == "trainer" and resource["rltel.experiment"] == "exp"
    assert snapshot.stream == "train" and snapshot.run_id == "exp_t1"
    stats.close()  # twice is fine
    stats.commit(1, 4, 14, data)  # after close: nothing happens
    assert len(sink.snapshots) == 1


def test_embedded_default_builds_the_configured_sinks(tmp_path, capsys):
    stats = StatsLogger(config(tmp_path, console={"enabled": True, "width": 80}))
    stats.commit(0, 0, 5, {"a/b": 1.5, "a/b__count": 3.0})
    stats.close()
    out = capsys.readouterr().out
    assert "step 5" in out and "a/b" in out and "1.5" in out and "__count" not in out


def test_list_of_dicts_logs_consecutive_steps(tmp_path):
    sink = InMemorySink()
    stats = StatsLogger(config(tmp_path), sinks=[sink])
    stats.commit(2, 10, 100, [{"x": float(i)} for i in range(3)])
    stats.close()
    steps = [(s.step.epoch, s.step.epoch_step, s.step.global_step) for s in sink.snapshots]
    assert steps == [(2, 10, 100), (2, 11, 101), (2, 12, 102)]
    assert [s.flat() for s in sink.snapshots] == [
        {"x": float(i), STEP_METRIC: 100.0 + i} for i in range(3)
    ]


def test_typed_and_plain_commits_over_otlp(tmp_path):
    values = np.random.default_rng(0).normal(size=50)
    typed = Stats(
        [
            Histogram(
                "ppo_actor/update/ratio",
                count=values.size,
                sum=float(values.sum()),
                min=float(values.min()),
                max=float(values.max()),
                bounds=(0.0,),
                bucket_counts=(int((values <= 0).sum()), int((values > 0).sum())),
            ),
            Histogram("ppo_actor/update/n", count=4, sum=10.0, reduce=StatReduce.SUM),
            Counter("train_perf/tokens", 4096.0, unit="{token}", start_time_unix_nano=3),
            Gauge("moe_balance/max_over_ideal", 1.25, attributes=(("layer", 0),)),
        ]
    )
    typed["timeperf/step"] = 0.5  # a plain value added by hand
    assert typed["ppo_actor/update/ratio/avg"] == pytest.approx(values.mean())
    with Receiver() as receiver:
        stats = StatsLogger(config(tmp_path, receiver.endpoint), otlp_options=FAST)
        stats.commit(0, 0, 1, typed)
        deadline = time.monotonic() + 5
        while not stats.health()["otlp"]["points_exported"] and time.monotonic() < deadline:
            time.sleep(0.005)
        stats.commit(0, 1, 2, dict(typed))  # AReaL's plain dict of the same export
        stats.close()
    first, second, _closed = receiver.requests
    assert (step_of(first), step_of(second)) == (1, 2)
    m = user_metrics(first)
    (ratio,) = m["ppo_actor/update/ratio"].histogram.data_points
    assert ratio.count == 50 and ratio.sum == pytest.approx(values.sum())
    assert (ratio.min, ratio.max) == (values.min(), values.max())
    assert list(ratio.bucket_counts) == [int((values <= 0).sum()), int((values > 0).sum())]
    assert m["ppo_actor/update/n"].description == "rltel.reduce=sum"
    assert m["train_perf/tokens"].sum.is_monotonic
    assert m["moe_balance/max_over_ideal"].WhichOneof("data") == "gauge"
    assert m["timeperf/step"].gauge.data_points[0].as_double == 0.5
    plain = user_metrics(second)
    assert all(
        metric.WhichOneof("data") == "gauge"
        for name, metric in plain.items()
        if not name.startswith("train.")
    )
    flat = {n: mt.gauge.data_points[0].as_double for n, mt in plain.items() if "/" in n}
    assert flat == pytest.approx({k: v for k, v in typed.items() if not k.endswith("__count")})
    resource = resource_of(first)
    assert resource["rltel.role"] == "trainer" and resource["rltel.stream"] == "train"
    health = metrics_of(second)["rltel/otlp/points_exported"].sum.data_points[0]
    heartbeat = 1
    assert health.as_double == (
        len(stats_points(typed)) + heartbeat + len(stats.otlp.health_points())
    )


def test_nonfinite_values_never_raise_and_are_counted(tmp_path):
    with Receiver() as receiver:
        stats = StatsLogger(config(tmp_path, receiver.endpoint), otlp_options=FAST)
        stats.commit(0, 0, 0, {"a": math.nan, "b": math.inf, "c": 1.0})
        stats.close()
    metrics = user_metrics(receiver.requests[0])
    assert math.isnan(metrics["a"].gauge.data_points[0].as_double)
    assert metrics["b"].gauge.data_points[0].as_double == math.inf
    assert stats.health()["otlp"]["nonfinite_values"] == 2


def test_rollout_worker_sends_cumulative_scalar_totals(tmp_path):
    windows = [(0.5, 4), (math.nan, 2), (1.0, 6), (3.0, 0)]
    with Receiver() as receiver:
        stats = StatsLogger(
            config(tmp_path, receiver.endpoint),
            role="rollout",
            worker_id="w7",
            otlp_options=FAST,
        )
        for step, (value, count) in enumerate(windows):
            hist = Histogram("rollout/len", count=2, sum=float(step), min=0.0, max=float(step))
            stats.commit(0, step, step, Stats([ScalarMean("rollout/reward", value, count), hist]))
        stats.close()
    sums, counts = [], []
    for request in receiver.requests:
        assert resource_of(request)["rltel.worker_id"] == "w7"
        assert resource_of(request)["rltel.stream"] == "rollout"
        metric = metrics_of(request)["rollout/reward"]
        assert metric.histogram.aggregation_temporality == CUMULATIVE
        (point,) = metric.histogram.data_points
        assert point.start_time_unix_nano == stats.start_unix_nano
        sums.append(point.sum)
        counts.append(point.count)
        hist = metrics_of(request)["rollout/len"]
        assert hist.histogram.aggregation_temporality == DELTA
    finite = [(v, c) for v, c in windows if math.isfinite(v)]
    reference_counts = np.cumsum([c if math.isfinite(v) else 0 for v, c in windows])
    reference_sums = np.cumsum([v * c if math.isfinite(v) else 0.0 for v, c in windows])
    assert counts == reference_counts.tolist() and len(finite) == 3
    assert sums == pytest.approx(reference_sums.tolist())
    # the NaN window is left out of the totals, but never silently: it is counted
    assert stats.health()["otlp"]["nonfinite_values"] == 1


def test_collector_down_then_up_loses_nothing(tmp_path):
    """Commits through an outage and a recovery all arrive in order (commit's cost with
    the collector down is bench/export_bench.py's to measure, not a test's)."""
    receiver = Receiver()  # down
    stats = StatsLogger(config(tmp_path, receiver.endpoint), otlp_options=FAST)
    data = {f"scope/key_{i}/avg": float(i) for i in range(200)}
    try:
        for step in range(150):
            stats.commit(0, step, step, data)
            if step == 100:
                assert stats.health()["otlp"]["points_spooled"] > 0
                receiver.start()
            time.sleep(0.002)
        assert receiver.wait_for(lambda r: len(r) >= 150, 60.0)
        stats.close()
    finally:
        receiver.stop()
    assert [step_of(r) for r in receiver.requests] == [*range(150), 149]  # + close marker
    assert all(len(user_metrics(r)) == 203 for r in receiver.requests[:-1])
    assert not list((tmp_path / "exp" / "t1" / "otlp-spool" / "trainer").glob("*.seg"))


KILLED_WRITER = """
import sys, time
from rltel.logger import CLOSED_METRIC, STEP_METRIC, StatsLogger
stats = StatsLogger(
    {"fileroot": sys.argv[1], "otlp": {"endpoint": sys.argv[2]}},
    otlp_options={"backoff_s": 0.01, "max_backoff_s": 0.05},
)
for step in range(20):
    stats.commit(0, step, step, {"x": float(step)})
while stats.health()["otlp"]["spool_points"] < 20 * 12:  # x, rltel/step, 10 health points
    time.sleep(0.01)
print("spooled", flush=True)
time.sleep(60)
"""


def test_killed_process_loses_nothing_that_was_spooled(tmp_path):
    receiver = Receiver()  # down while the first process runs
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path), receiver.endpoint],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "spooled"
    finally:
        child.kill()  # SIGKILL: no close(), no atexit
        child.wait()
    with receiver:
        stats = StatsLogger(
            {"fileroot": str(tmp_path), "otlp": {"endpoint": receiver.endpoint}},
            otlp_options=FAST,
        )
        stats.commit(0, 20, 20, {"x": 20.0})
        stats.close(5.0)
    assert [step_of(r) for r in receiver.requests] == [*range(21), 20]  # + close marker
    values = [user_metrics(r)["x"].gauge.data_points[0].as_double for r in receiver.requests[:-1]]
    assert values == [float(step) for step in range(21)]


def test_a_logger_without_sinks_warns_naming_every_key_that_turns_one_on(tmp_path, caplog):
    stats = StatsLogger({"fileroot": str(tmp_path), "console": {"enabled": False}})
    stats.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    keys = ("console.enabled", "prometheus.enabled", "swanlab.mode", "tensorboard.path")
    for key in (*keys, "wandb.mode", "otlp.endpoint"):
        assert f"stats_logger.{key}" in warning
    assert warning.endswith("or set stats_logger.otlp.endpoint")


def test_secrets_are_never_logged(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    secrets = {"wandb": {"wandb_api_key": "WANDB-SECRET-1"}, "swanlab": {"api_key": "SWAN-2"}}
    down = Receiver()
    cfg = config(tmp_path, down.endpoint, **secrets)
    cfg["otlp"]["headers"] = {"authorization": "Bearer HDR-SECRET-3"}
    stats = StatsLogger(cfg, otlp_options=FAST)
    stats.commit(0, 0, 0, {"x": 1.0})
    stats.close(0.5)
    assert "stats logger" in caplog.text
    for secret in ("WANDB-SECRET-1", "SWAN-2", "HDR-SECRET-3"):
        assert secret not in caplog.text


def test_forked_child_logs_nothing(tmp_path):
    out = tmp_path / "console.txt"
    with out.open("a") as stream:
        stats = StatsLogger(config(tmp_path), sinks=[ConsoleSink(stream=stream)])
        stats.commit(0, 1, 1, {"x": 1.0})
        pid = os.fork()
        if pid == 0:  # a data-loader worker: commit, health and close must do nothing
            stats.commit(0, 99, 99, {"x": 2.0})
            healthy = stats.health() == {}
            stats.close(1.0)
            os._exit(0 if healthy else 1)
        _, status = os.waitpid(pid, 0)
        stats.commit(0, 2, 2, {"x": 3.0})
        stats.close()
    assert os.waitstatus_to_exitcode(status) == 0
    text = out.read_text()
    assert "step 1 " in text and "step 2 " in text and "step 99" not in text


def test_unknown_role_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="role"):
        StatsLogger(config(tmp_path), role="learner", sinks=[])


def _rank_commits(rank: int, world: int, endpoint: str, root: str) -> dict:
    stats = StatsLogger({"fileroot": root, "otlp": {"endpoint": endpoint}}, otlp_options=FAST)
    for step in range(3):
        stats.commit(0, step, step, {"rank": float(rank)})
    stats.close(5.0)
    return {"enabled": stats.enabled, "rank": stats.rank, "otlp": stats.otlp is not None}


def test_only_rank_zero_logs(tmp_path):
    with Receiver() as receiver:
        results = run_ranks(_rank_commits, 2, receiver.endpoint, str(tmp_path), timeout=90)
    assert results == [
        {"enabled": True, "rank": 0, "otlp": True},
        {"enabled": False, "rank": 1, "otlp": False},
    ]
    requests = receiver.requests
    assert [step_of(r) for r in requests] == [0, 1, 2, 2]  # + rank 0's close marker
    assert {resource_of(r)["rltel.rank"] for r in requests} == {0}
    assert {user_metrics(r)["rank"].gauge.data_points[0].as_double for r in requests[:-1]} == {0.0}


def test_embedded_prometheus_serves_every_sinks_queue_health(tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    sections = {"prometheus": {"enabled": True, "port": 0}, "console": {"enabled": False}}
    logger = StatsLogger(config(tmp_path, **sections))
    logger.commit(0, 0, 1, {"loss": 1.0})
    logger.commit(0, 1, 2, {"loss": 2.0})
    assert logger.fanout.force_flush(10)
    url = logger.prometheus_url  # the port it bound, not the configured 0
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/metrics"), url
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    exported = {
        (s.labels["run"], s.labels["sink"]): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "rltel_collector_sink_exported_total"  # the collector's family
    }
    logger.close()
    # samples.jsonl's writer (stats_logger.samples.jsonl) is an embedded sink too
    assert exported == {("exp_t1", "prometheus"): 2.0, ("exp_t1", "samples"): 2.0}
    without = StatsLogger(config(tmp_path / "off", console={"enabled": True}))
    assert without.prometheus_url is None
    without.close()


def test_trainer_exports_carry_the_step_heartbeat(tmp_path):
    """``rltel/step`` = global_step on every trainer export (Prometheus has no other step)."""
    trainer_sink, rollout_sink = InMemorySink(), InMemorySink()
    trainer = StatsLogger(config(tmp_path), sinks=[trainer_sink])
    rollout = StatsLogger(config(tmp_path), role="rollout", worker_id=1, sinks=[rollout_sink])
    for step in (7, 8):
        trainer.commit(0, step, step, {"x": 1.0})
        rollout.commit(0, step, step, {"r": 1.0, "r__count": 2.0})
    trainer.close()
    rollout.close()
    beats = [next(p for p in s.points if p.metric == STEP_METRIC) for s in trainer_sink.snapshots]
    assert [(b.value, type(b)) for b in beats] == [(7.0, Gauge), (8.0, Gauge)]
    assert len(trainer_sink.snapshots) == 2  # embedded: no close marker (the endpoint goes away)
    assert not any(p.metric.startswith("rltel/") for s in rollout_sink.snapshots for p in s.points)


def test_close_tells_the_collector_the_trainer_ended(tmp_path):
    with Receiver() as receiver:
        trainer = StatsLogger(config(tmp_path, receiver.endpoint), otlp_options=FAST)
        trainer.commit(0, 4, 41, {"x": 1.0})
        trainer.commit(0, 5, 42, {"x": 2.0})
        trainer.close()
        trainer.close()  # once only
        idle = StatsLogger(config(tmp_path / "idle", receiver.endpoint), otlp_options=FAST)
        idle.close()  # nothing committed: nothing to end
        rollout = StatsLogger(
            config(tmp_path, receiver.endpoint), role="rollout", otlp_options=FAST
        )
        rollout.commit(0, 1, 1, {"r": 1.0})
        rollout.close()
    requests = [r for r in receiver.requests if resource_of(r)["rltel.role"] == "trainer"]
    assert [step_of(r) for r in requests] == [41, 42, 42]
    last = metrics_of(requests[-1])
    assert last[CLOSED_METRIC].gauge.data_points[0].as_double == 1.0
    assert last[STEP_METRIC].gauge.data_points[0].as_double == 42.0
    assert set(user_metrics(requests[-1])) == {"train.step", "train.epoch", "train.epoch_step"}
    assert all(CLOSED_METRIC not in metrics_of(r) for r in requests[:-1])
    rollouts = [r for r in receiver.requests if resource_of(r)["rltel.role"] == "rollout"]
    assert len(rollouts) == 1 and CLOSED_METRIC not in metrics_of(rollouts[0])


def test_one_fan_out_with_or_without_otlp(tmp_path):
    """ "In-process" and "through the collector" differ only in the fan-out's sink list."""
    sections = {"prometheus": {"enabled": True, "port": 0}, "console": {"enabled": True}}
    embedded = StatsLogger(config(tmp_path, **sections))
    assert [q.name for q in embedded.fanout.queued] == ["console", "prometheus", "samples"]
    assert embedded.otlp is None and set(embedded.health()) == {"sinks"}
    embedded.close()

    with Receiver() as receiver:
        remote = StatsLogger(config(tmp_path, receiver.endpoint, **sections), otlp_options=FAST)
        assert [q.name for q in remote.fanout.queued] == ["otlp"]  # the collector runs the rest
        remote.close()

        local = InMemorySink()
        both = StatsLogger(config(tmp_path, receiver.endpoint), sinks=[local], otlp_options=FAST)
        assert [q.name for q in both.fanout.queued] == ["memory", "otlp"]
        assert both.otlp is both.fanout.queued[1].sink
        both.commit(0, 0, 7, {"x": 1.0})
        assert both.fanout.force_flush(10.0)
        health = both.health()
        assert (
            set(health["sinks"]) == {"memory", "otlp"} and health["otlp"]["requests_exported"] == 1
        )
        assert health["sinks"]["otlp"].exported == health["sinks"]["memory"].exported == 1
        both.close()
    (snapshot,) = local.snapshots  # the close marker goes to the collector only
    requests = receiver.requests
    assert [step_of(r) for r in requests] == [7, 7]
    assert user_metrics(requests[0])["x"].gauge.data_points[0].as_double == 1.0
    assert CLOSED_METRIC in metrics_of(requests[1]) and snapshot.step.global_step == 7
