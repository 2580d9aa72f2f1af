"""Samples through a real ``rltel collector``: 2 gloo trainer ranks and 2 rollout workers log
samples; W&B (offline, read back with W&B's CLI), TensorBoard (its event reader), SwanLab (its
backup reader) and ``samples.jsonl`` hold the same rows, each at the step it belongs to,
bounded, redacted and truncated; a step of 10,000 samples keeps its logs request small."""

from __future__ import annotations

import glob
import json
import multiprocessing as mp
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("wandb")
pytest.importorskip("swanlab")

from telemetry.model.sample import TRUNCATION_MARK
from tests.collector.test_integration import CollectorProcess, wait_sent
from tests.telemetry.test_samples_trackers import normal, swanlab_rows, tensorboard_rows
from tests.wandb_log import inspect_wandb

LIMIT, RESERVOIR, EXTREMES = 96, 3, 1
BOUND = {"reservoir": RESERVOIR, "extremes": EXTREMES, "max_text_bytes": LIMIT}
STEPS, WORKERS, PER_RANK = (1, 2), 2, 6
BIG_STEP, BIG = 2, 10_000  # rank 1 logs this many samples at BIG_STEP


# who logs a step's lowest (-1) and highest (+1) rollout reward: as the extremes are always
# kept, rank 1's and both workers' samples reach the trackers whatever the reservoir draws
EXTREME = {(1, "t1"): -1, (1, "w0"): 1, (2, "w1"): -1, (2, "t1"): 1}


def logged(who: str, step: int, stream: str, i: int) -> dict:
    """Sample ``i`` of ``who`` (``t0``, ``t1``, ``w0``, ``w1``) at ``step``, before redaction."""
    tail = "y" * 150 if i % 4 == 1 else ""
    reward = float((i * 7 + 3 * len(who) + step) % 23) + (0.5 if who[0] == "w" else 0.0)
    if stream == "rollout" and i == 0 and (step, who) in EXTREME:
        reward = EXTREME[step, who] * (100.0 + step)
    return {
        "prompt": f"{who} prompt {i}",
        "completion": f"{who}/{step}/{i} key=SECRET-{i}{tail}",
        "reward": reward,
    }


def sent(who: str, step: int, stream: str, n: int) -> list[dict]:
    return [logged(who, step, stream, i) for i in range(n)]


def redact(fields: dict) -> dict:
    """The senders' hook: text fields only reach it."""
    return {k: v.replace("SECRET-", "[redacted]-") for k, v in fields.items()}


def log_all(rows: list[dict], stream: str) -> None:
    from telemetry.samples import log_sample

    for row in rows:
        text = {k: row[k] for k in ("prompt", "completion")}
        log_sample(stream, text=text, numbers={"reward": row["reward"]})


def config(endpoint: str, root: str) -> dict:
    otlp = {"endpoint": endpoint, "timeout": 60.0}  # a loaded machine: no deadline retries
    names = {"experiment_name": "exp", "trial_name": "t1", "fileroot": root}
    return {**names, "otlp": otlp, "samples": BOUND}


def worker(w: int, endpoint: str, root: str, commands, done) -> None:
    from rltel.logger import StatsLogger
    from telemetry import samples

    samples.set_redact(redact)
    logger = StatsLogger(config(endpoint, root), role="rollout", worker_id=w)
    while (step := commands.get(timeout=90)) is not None:
        log_all(sent(f"w{w}", step, "rollout", PER_RANK), "rollout")
        if w == 0:
            log_all(sent("w0", step, "eval-rollout", 2), "eval-rollout")
        logger.commit(0, step, step, {"rollout/reward": 1.0})
        wait_sent(logger)
        done.put(("worker", w, step))
    logger.close()


def trainer(rank: int, world: int, endpoint: str, root: str, commands, done) -> list[int]:
    import torch.distributed as dist

    from exporters.base import InMemorySink
    from rltel.logger import StatsLogger
    from telemetry import samples, stats_tracker
    from telemetry.otlp.samples import encode_samples

    samples.set_redact(redact)
    copy = InMemorySink()  # beside the OTLP sink: the snapshots it sends
    logger = StatsLogger(config(endpoint, root), role="trainer", sinks=[copy])
    while (step := commands[rank].get(timeout=90)) is not None:
        n = BIG if (rank, step) == (1, BIG_STEP) else PER_RANK
        log_all(sent(f"t{rank}", step, "rollout", n), "rollout")
        stats_tracker.get("").scalar(loss=float(step))
        logger.commit(0, step, step, stats_tracker.export_all(reduce_group=dist.group.WORLD))
        if rank == 0:
            wait_sent(logger)
        dist.barrier()
        done.put(("trainer", rank, step))
    logger.close()
    return [encode_samples(s).ByteSize() for s in copy.snapshots if s.samples]


def run_job(tmp_path: Path) -> tuple[Path, list[int]]:
    from tests.distributed import run_ranks

    bound = {"samples": BOUND, "tensorboard": {"path": str(tmp_path / "tb")}}
    collector = CollectorProcess(
        tmp_path, {**bound, "wandb": {"mode": "offline"}, "swanlab": {"mode": "offline"}}
    )
    root = str(tmp_path / "senders")  # the senders' spool, if a request waits
    ctx = mp.get_context("spawn")
    manager = ctx.Manager()
    worker_q = [manager.Queue() for _ in range(WORKERS)]
    trainer_q = [manager.Queue() for _ in range(2)]
    done = manager.Queue()
    procs = [
        ctx.Process(target=worker, args=(w, collector.endpoint, root, worker_q[w], done))
        for w in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    outcome: dict = {}

    def ranks() -> None:
        try:
            outcome["sizes"] = run_ranks(
                trainer, 2, collector.endpoint, root, trainer_q, done, timeout=180
            )
        except BaseException as exc:  # asserted on the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=ranks, daemon=True)
    thread.start()
    try:
        for step in STEPS:  # the workers' samples, then the training step they belong to
            for q in worker_q:
                q.put(step)
            assert sorted(done.get(timeout=120)[1] for _ in range(WORKERS)) == [0, 1]
            for q in trainer_q:
                q.put(step)
            assert sorted(done.get(timeout=120)[1] for _ in range(2)) == [0, 1]
        for q in (*worker_q, *trainer_q):
            q.put(None)
        for proc in procs:
            proc.join(60)
        thread.join(60)
        assert "error" not in outcome, outcome.get("error")
        assert all(proc.exitcode == 0 for proc in procs)
    finally:
        code = collector.terminate()
        manager.shutdown()
    assert code == 0, "".join(collector.lines)
    return tmp_path / "files" / "exp" / "t1", outcome["sizes"][0]


def wandb_rows(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The samples tables' rows at their ``samples/step``, and every history row."""
    (path,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb"))
    files = Path(path).parent / "files"
    items = [r["history"]["item"] for r in inspect_wandb(path) if r["type"] == "history"]
    rows = []
    for item in items:
        for stream in ("rollout", "eval-rollout"):
            if f"samples/{stream}.path" in item:
                table = json.loads((files / item[f"samples/{stream}.path"]).read_text())
                for values in table["data"]:
                    cells = dict(zip(table["columns"], values, strict=True))
                    rows.append(normal({"step": item["samples/step"], "stream": stream, **cells}))
    return rows, items


def who_and_step(row: dict) -> tuple[str, int, int]:
    who, step, i = row["completion"].split(" ")[0].split("/")
    return who, int(step), int(i.split(" ")[0])


def test_samples_of_trainer_ranks_and_rollout_workers_reach_every_tracker_at_their_step(tmp_path):
    run_dir, sizes = run_job(tmp_path)
    jsonl = [normal(json.loads(line)) for line in (run_dir / "samples.jsonl").open()]
    (swan,) = glob.glob(str(run_dir / "swanlog" / "**" / "backup.swanlab"), recursive=True)
    wandb, history = wandb_rows(run_dir)
    key = lambda row: (row["step"], row["stream"], row["completion"])  # noqa: E731
    trackers = {
        "wandb": wandb,
        "tensorboard": tensorboard_rows(tmp_path / "tb" / "exp" / "t1"),
        "swanlab": swanlab_rows(os.path.dirname(swan)),
    }
    for name, rows in trackers.items():
        assert sorted(rows, key=key) == sorted(jsonl, key=key), name
    # the trainer's rows stay at _step == global_step (samples ride their own axis)
    assert {int(r["_step"]): r["loss"] for r in history if "loss" in r} == {
        s: float(s) for s in STEPS
    }

    by_step: dict[tuple, list[dict]] = {}
    for row in jsonl:
        by_step.setdefault((row["step"], row["stream"]), []).append(row)
    assert sorted(by_step) == sorted((s, st) for s in STEPS for st in ("rollout", "eval-rollout"))
    for (step, stream), rows in by_step.items():
        if stream == "eval-rollout":
            every = sent("w0", step, stream, 2)
        else:
            n = {f"t{r}": BIG if (r, step) == (1, BIG_STEP) else PER_RANK for r in range(2)}
            n.update({f"w{w}": PER_RANK for w in range(WORKERS)})
            every = [row for who, k in n.items() for row in sent(who, step, stream, k)]
        assert len(rows) <= RESERVOIR + 2 * EXTREMES and len({key(r) for r in rows}) == len(rows)
        rewards = [row["reward"] for row in every]
        assert {min(rewards), max(rewards)} <= {row["reward"] for row in rows}, (step, stream)
        for row in rows:
            who, origin, i = who_and_step(row)
            assert origin == step  # every sample at the step it belongs to
            fields = logged(who, step, stream, i)
            fields.update(redact({k: fields[k] for k in ("prompt", "completion")}))
            cut = []
            for name in ("prompt", "completion"):
                if len(fields[name].encode()) > LIMIT:
                    head = fields[name].encode()[: LIMIT - len(TRUNCATION_MARK.encode())]
                    fields[name] = head.decode() + TRUNCATION_MARK
                    cut.append(name)
            assert {k: row[k] for k in ("prompt", "completion", "reward")} == fields
            assert row["truncated"] == ",".join(cut)
    origins = {who_and_step(row)[0] for row in jsonl}
    assert origins >= {"t1", "w0", "w1"}  # rank 1's and both workers' samples arrived
    assert any(row["truncated"] for row in jsonl)
    for path in (
        run_dir / "samples.jsonl",
        Path(swan).parent,
        run_dir / "wandb",
        run_dir / "tensorboard",
    ):
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        blob = b"".join(p.read_bytes() for p in files)
        assert b"SECRET-" not in blob and b"[redacted]-" in blob, path
    # rank 0's logs request per step: the kept samples only, 10,000 logged or 12
    assert len(sizes) == len(STEPS) and max(sizes) < 4096, sizes
