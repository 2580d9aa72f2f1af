"""Samples through a SIGKILLed and restarted ``rltel collector`` (durable on) are written once.

A trainer and 2 rollout workers (real StatsLoggers in their own processes) log samples over
OTLP; the collector is SIGKILLed once while the workers' samples of a step wait for it, and
once right after a step's samples were released into its sinks, and restarted each time on
the same port and state directory. ``samples.jsonl``, TensorBoard's text events (its reader)
and the W&B offline run (W&B's reader) hold every (step, stream)'s rows once, equal to what
the senders kept.
"""

from __future__ import annotations

import glob
import json
import multiprocessing as mp
import signal
from collections import Counter as Tally
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from tests.collector.test_integration import CollectorProcess, wait_sent
from tests.telemetry.test_samples_trackers import normal, tensorboard_rows
from tests.wandb_log import inspect_wandb

STEPS, PER = 3, 3  # each sender's samples per step: all kept (the bound is 16 + 2 * 2)
WAITING = RELEASED = 2  # killed with step 2's worker samples waiting, then after its release
SENDERS = ("w0", "w1", "t0")


def rows_of(who: str, step: int) -> list[dict]:
    """What ``who`` logs at ``step``: ``PER`` rollout samples (worker 0 one eval sample too)."""
    streams = ["rollout"] * PER + (["eval-rollout"] if who == "w0" else [])
    return [
        {"stream": stream, "step": step, "completion": f"{who}/{step}/{i}", "reward": i + 0.5}
        for i, stream in enumerate(streams)
    ]


def sender(who: str, root: str, commands, done) -> None:
    """Started before the collector (its imports overlap the collector's start); the first
    command is the collector's endpoint, then each step to log, then None."""
    import torch  # noqa: F401  (what the StatsLogger loads, before the endpoint comes)

    from rltel.logger import StatsLogger
    from telemetry.samples import log_sample

    endpoint = commands.get(timeout=120)
    names = {"experiment_name": "exp", "trial_name": "t1", "fileroot": root}
    config = {**names, "otlp": {"endpoint": endpoint, "timeout": 60.0}}
    if who.startswith("w"):
        logger = StatsLogger(config, role="rollout", worker_id=int(who[1:]))
    else:
        logger = StatsLogger(config, role="trainer")
    while (step := commands.get(timeout=120)) is not None:
        for row in rows_of(who, step):
            text = {"completion": row["completion"]}
            log_sample(row["stream"], text=text, numbers={"reward": row["reward"]})
        logger.commit(0, step, step, {"loss" if who == "t0" else "rollout/reward": 1.0})
        wait_sent(logger, timeout=120)
        done.put((who, step))
    logger.close()


def collector(tmp_path: Path, port: int = 0) -> CollectorProcess:
    sinks = {"tensorboard": {"path": str(tmp_path / "tb")}, "wandb": {"mode": "offline"}}
    durable = {"directory": str(tmp_path / "state")}
    return CollectorProcess(tmp_path, sinks, durable=durable, start_timeout=120, port=port)


def kill(process: CollectorProcess) -> None:
    process.proc.kill()
    assert process.proc.wait(30) == -signal.SIGKILL, "".join(process.lines)


def run(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    queues = {who: manager.Queue() for who in SENDERS}
    done = manager.Queue()
    procs = [
        ctx.Process(target=sender, args=(w, str(tmp_path / "s"), queues[w], done)) for w in SENDERS
    ]

    def step_of(who: tuple[str, ...], step: int) -> None:
        for name in who:
            queues[name].put(step)
        assert sorted(done.get(timeout=120) for _ in who) == [(name, step) for name in who]

    for proc in procs:
        proc.start()
    live: CollectorProcess | None = None
    try:
        live = collector(tmp_path)
        port = int(live.endpoint.rsplit(":", 1)[1])
        for name in SENDERS:
            queues[name].put(live.endpoint)
        for step in range(1, STEPS + 1):
            step_of(("w0", "w1"), step)  # the workers' samples wait for the training step
            if step == WAITING:
                kill(live)
                live = collector(tmp_path, port)
            step_of(("t0",), step)  # the trainer's step releases them with its own
            if step == RELEASED:
                kill(live)
                live = collector(tmp_path, port)
        for name in SENDERS:
            queues[name].put(None)
        for proc in procs:
            proc.join(60)
        assert all(proc.exitcode == 0 for proc in procs)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        code = live.terminate() if live is not None else None
        manager.shutdown()
    assert code == 0, "".join(live.lines)


def wandb_rows(run_dir: Path) -> list[dict]:
    """The samples tables' rows at their ``samples/step``, over every offline part."""
    parts = sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb")))
    rows = []
    with ThreadPoolExecutor(len(parts)) as pool:
        for path, records in zip(parts, pool.map(inspect_wandb, parts), strict=True):
            for record in records:
                item = record["history"]["item"] if record["type"] == "history" else {}
                for stream in ("rollout", "eval-rollout"):
                    if f"samples/{stream}.path" not in item:
                        continue
                    files = Path(path).parent / "files"
                    table = json.loads((files / item[f"samples/{stream}.path"]).read_text())
                    for values in table["data"]:
                        cells = dict(zip(table["columns"], values, strict=True))
                        step = item["samples/step"]
                        rows.append(normal({"step": step, "stream": stream, **cells}))
    return rows


def test_samples_survive_a_sigkill_of_the_collector_once_per_step_and_stream(tmp_path):
    run(tmp_path)
    run_dir = tmp_path / "files" / "exp" / "t1"
    jsonl = [normal(json.loads(line)) for line in (run_dir / "samples.jsonl").open()]
    want = Tally(
        (step, row["stream"], row["completion"], row["reward"])
        for step in range(1, STEPS + 1)
        for who in SENDERS
        for row in rows_of(who, step)
    )
    trackers = {
        "samples.jsonl": jsonl,
        "tensorboard": tensorboard_rows(tmp_path / "tb" / "exp" / "t1"),
        "wandb": wandb_rows(run_dir),
    }
    for name, rows in trackers.items():
        got = Tally((r["step"], r["stream"], r["completion"], r["reward"]) for r in rows)
        assert got == want, (name, sorted((got - want).elements()), sorted((want - got).elements()))
    assert not (tmp_path / "state").exists()  # everything delivered: the journals emptied
