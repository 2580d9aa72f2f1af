"""The collector as a process: SIGTERM drains busy sinks; trainers + rollout workers end to end."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

pytest.importorskip("tensorboard")

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from tensorboard.backend.event_processing import event_accumulator as ea

from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.encode import encode
from tests.wandb_log import inspect_wandb

from .conftest import samples, scrape

REPO = Path(__file__).resolve().parents[2]
METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
RUN = (("rltel.experiment", "exp"), ("rltel.trial", "t1"), ("service.name", "trainer"))


class CollectorProcess:
    """``python -m collector --config`` in a subprocess, with its announced endpoints."""

    def __init__(
        self,
        tmp_path: Path,
        sinks: dict,
        limits: dict | None = None,
        durable: dict | None = None,
        start_timeout: float = 60,
        port: int = 0,
        scrape: dict | None = None,
    ) -> None:
        config = {
            "receiver": {"port": port},
            "limits": {"queue_size": 100_000, "drain_timeout_s": 60, **(limits or {})},
            "sinks": {"fileroot": str(tmp_path / "files"), "prometheus": {"port": 0}, **sinks},
        }
        if durable is not None:
            config["durable"] = durable
        if scrape is not None:  # the endpoints it scrapes (collector.scrape)
            config["scrape"] = scrape
        path = tmp_path / "collector.yaml"
        path.write_text(yaml.safe_dump({"collector": config}))
        env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}  # W&B of its own:
        env.update(PYTHONPATH=str(REPO), WANDB_SILENT="true")  # a shared one holds the run id
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "collector", "--config", str(path)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        line = self._readline(start_timeout)
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        self.endpoint, self.metrics_url = fields["otlp"], fields["metrics"]
        self._reader = threading.Thread(target=self._drain_output, daemon=True)
        self._reader.start()

    def _readline(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                break
            self.lines.append(line)
            if line.startswith("rltel collector: otlp="):
                return line.strip()
        raise AssertionError("collector did not start:\n" + "".join(self.lines))

    def _drain_output(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self, sig: int, timeout: float = 90) -> int:
        """Send ``sig``; the exit code once the process ended and its output was read."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code

    def terminate(self, timeout: float = 90) -> int:
        return self.stop(signal.SIGTERM, timeout)


def train_request(step: int, keys: int) -> bytes:
    points = tuple(Gauge(f"train/k{i}", step * 1000.0 + i) for i in range(keys))
    snapshot = Snapshot(points, Step(0, step, step), (*RUN, ("rltel.rank", 0)), time.time_ns())
    (data,) = encode(snapshot, max_points=keys + 3)
    return encode_metrics(data).SerializeToString()


def read_tensorboard(path: Path) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc


def assert_each_step_once(path: Path, expected: Callable[[int], dict[str, float]], steps: int):
    """Every key of ``expected(1)`` in the TensorBoard run at ``path`` once at each step
    1..``steps``, with the value ``expected(step)`` gives it."""
    events = read_tensorboard(path)
    for key in expected(1):
        got = events.Scalars(key)
        assert [e.step for e in got] == list(range(1, steps + 1)), key  # each step once
        want = [expected(e.step)[key] for e in got]
        assert [e.value for e in got] == pytest.approx(want, rel=1e-6), key


def wandb_rows(tmp_path: Path) -> tuple[list[dict], list[dict]]:
    """History rows (key -> value) and all records of the run's offline ``.wandb`` file."""
    pattern = str(tmp_path / "files" / "exp" / "t1" / "wandb" / "offline-run-*" / "*.wandb")
    (path,) = glob.glob(pattern)
    records = inspect_wandb(path)
    rows = [r["history"]["item"] for r in records if r["type"] == "history"]
    return rows, records


def test_sigterm_while_sinks_are_busy_delivers_every_accepted_point(tmp_path):
    pytest.importorskip("wandb")
    sinks = {"tensorboard": {"path": str(tmp_path / "tb")}, "wandb": {"mode": "offline"}}
    collector = CollectorProcess(tmp_path, sinks)
    steps, keys = 60, 1500
    bodies = [train_request(step, keys) for step in range(1, steps + 1)]
    accepted: list[int] = []
    try:
        with grpc.insecure_channel(collector.endpoint) as channel:
            call = channel.unary_unary(METHOD, request_serializer=None)
            for step, body in enumerate(bodies, start=1):
                call(body, timeout=30)
                accepted.append(step)
        scraped = scrape(collector.metrics_url)
    finally:
        code = collector.terminate()
    output = "".join(collector.lines)
    assert code == 0, output
    assert "rltel collector: stopped" in output
    depth = samples(scraped, "rltel_collector_sink_queue_depth", sink="wandb")
    assert sum(depth.values()) > 0, "the sinks were idle at SIGTERM: the test proves nothing"
    acc = read_tensorboard(tmp_path / "tb" / "exp" / "t1")
    tags = acc.Tags()["scalars"]
    assert len(tags) == keys
    for key in (0, 777, keys - 1):
        events = acc.Scalars(f"train/k{key}")
        assert [e.step for e in events] == accepted
        assert [e.value for e in events] == [s * 1000.0 + key for s in accepted]
    rows, records = wandb_rows(tmp_path)
    logged = [r for r in rows if "train/k0" in r]
    assert [int(r["_step"]) for r in logged] == accepted
    assert all(len([k for k in r if k.startswith("train/")]) == keys for r in logged)
    assert [r["train/k777"] for r in logged] == [s * 1000.0 + 777 for s in accepted]
    assert any(r["type"] == "exit" for r in records)  # the run was finished: file complete


# -- two trainer ranks and three rollout workers, each its own process --------------------

ROUNDS = 3
WORKERS = 3


def rollout_rewards(worker: int, round_: int) -> np.ndarray:
    rng = np.random.default_rng(100 * worker + round_)
    return rng.normal(loc=round_, size=int(rng.integers(1, 7)))


def trainer_losses(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + 10 * rank + step)
    return rng.normal(size=32), rng.random(32) < 0.6


def _logger_config(endpoint: str) -> dict:
    return {
        "experiment_name": "exp",
        "trial_name": "t1",
        "otlp": {"endpoint": endpoint, "timeout": 10.0},
    }


def wait_sent(logger, timeout: float = 60.0) -> None:
    """Until everything ``logger`` queued was delivered (a commit's logs request, if it
    logged samples, after its metrics)."""
    assert logger.fanout.force_flush(timeout), f"export did not complete: {logger.health()}"


def rollout_worker(worker: int, endpoint: str, commands, done) -> None:
    from rltel.logger import StatsLogger

    logger = StatsLogger(_logger_config(endpoint), role="rollout", worker_id=worker)
    while (round_ := commands.get(timeout=60)) is not None:
        rewards = rollout_rewards(worker, round_)
        data = {"rollout/reward": float(rewards.mean()), "rollout/reward__count": len(rewards)}
        logger.commit(0, round_, round_, data)
        wait_sent(logger, timeout=30.0)
        done.put(("worker", worker, round_))
    logger.close()


def trainer_rank(rank: int, world: int, endpoint: str, commands, done) -> None:
    import torch
    import torch.distributed as dist

    from rltel.logger import StatsLogger
    from telemetry import stats_tracker

    logger = StatsLogger(_logger_config(endpoint), role="trainer")
    while (step := commands[rank].get(timeout=60)) is not None:
        loss, mask = trainer_losses(rank, step)
        stats_tracker.denominator(mask=torch.tensor(mask))
        stats_tracker.stat(loss=torch.tensor(loss), denominator="mask")
        stats = stats_tracker.export_all(reduce_group=dist.group.WORLD)
        logger.commit(0, step, step, stats)
        if rank == 0:
            wait_sent(logger, timeout=30.0)
        dist.barrier()
        done.put(("trainer", rank, step))
    logger.close()


def test_trainer_ranks_and_rollout_workers_merge_count_weighted_at_the_right_steps(tmp_path):
    pytest.importorskip("wandb")
    import multiprocessing as mp

    from tests.distributed import run_ranks

    collector = CollectorProcess(
        tmp_path,
        {"tensorboard": {"path": str(tmp_path / "tb")}, "wandb": {"mode": "offline"}},
    )
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    worker_q = [manager.Queue() for _ in range(WORKERS)]
    trainer_q = [manager.Queue() for _ in range(2)]
    done = manager.Queue()
    workers = [
        ctx.Process(target=rollout_worker, args=(w, collector.endpoint, worker_q[w], done))
        for w in range(WORKERS)
    ]
    for proc in workers:
        proc.start()
    outcome: dict[str, object] = {}

    def trainer_ranks() -> None:  # the ranks' results or error, asserted on the main thread
        try:
            outcome["results"] = run_ranks(
                trainer_rank, 2, collector.endpoint, trainer_q, done, timeout=120
            )
        except BaseException as exc:
            outcome["error"] = exc

    ranks = threading.Thread(target=trainer_ranks, daemon=True)
    ranks.start()
    try:
        for round_ in range(1, ROUNDS + 1):
            for q in worker_q:
                q.put(round_)
            got = sorted(done.get(timeout=90) for _ in range(WORKERS))
            assert [g[1] for g in got] == list(range(WORKERS))
            for q in trainer_q:
                q.put(round_)
            assert sorted(done.get(timeout=90)[1] for _ in range(2)) == [0, 1]
        for q in (*worker_q, *trainer_q):
            q.put(None)
        for proc in workers:
            proc.join(60)
        ranks.join(60)
        assert not ranks.is_alive(), "trainer ranks did not finish"
        assert "error" not in outcome, outcome.get("error")
        assert len(outcome["results"]) == 2
        assert all(p.exitcode == 0 for p in workers)
    finally:
        code = collector.terminate()
        manager.shutdown()
    assert code == 0, "".join(collector.lines)

    expected_reward, expected_loss = {}, {}
    for step in range(1, ROUNDS + 1):
        rewards = np.concatenate([rollout_rewards(w, step) for w in range(WORKERS)])
        expected_reward[step] = rewards.mean()  # == sum(mean_w * n_w) / sum(n_w)
        parts = [trainer_losses(r, step) for r in range(2)]
        expected_loss[step] = np.concatenate([loss[mask] for loss, mask in parts]).mean()

    acc = read_tensorboard(tmp_path / "tb" / "exp" / "t1")
    reward = {e.step: e.value for e in acc.Scalars("rollout/reward")}
    assert reward.keys() == expected_reward.keys()
    for step, value in expected_reward.items():
        assert reward[step] == pytest.approx(value, rel=1e-6)
    loss = {e.step: e.value for e in acc.Scalars("loss/avg")}
    assert loss == pytest.approx(expected_loss, rel=1e-6)

    rows, records = wandb_rows(tmp_path)
    logged = {int(r["rollout/step"]): r["rollout/reward"] for r in rows if "rollout/reward" in r}
    assert logged == pytest.approx(expected_reward, rel=1e-6)
    losses = {int(r["_step"]): r["loss/avg"] for r in rows if "loss/avg" in r}
    assert losses == pytest.approx(expected_loss, rel=1e-6)
    assert any(r["type"] == "exit" for r in records)  # the run was finished: file complete
