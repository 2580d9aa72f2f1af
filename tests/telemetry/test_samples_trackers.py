"""Samples in every embedded tracker: one StatsLogger with W&B (offline, read back with W&B's
CLI), TensorBoard (TensorBoard's event reader), SwanLab (SwanLab's backup reader) and
``samples.jsonl``; every tracker holds the same bounded, redacted, truncated rows at the
right steps and streams."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("swanlab")
pytest.importorskip("wandb")

from swanlab.log.backup.datastore import DataStore
from swanlab.log.backup.models import ModelsParser
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.util import tensor_util

from exporters import swanlab as swanlab_sinks
from exporters import wandb as wandb_sinks
from rltel.logger import StatsLogger
from telemetry import samples
from telemetry.model.sample import TRUNCATION_MARK
from tests.wandb_log import inspect_wandb

LIMIT, STEPS, PER_STEP = 96, (0, 1, 2), 20
STREAMS = ("rollout", "eval-rollout")


def logged(step: int, stream: str, i: int) -> dict:
    """The fields of sample ``i`` of ``stream`` at ``step`` as logged (before redaction)."""
    tail = "x" * 200 if i % 5 == 0 else ""
    return {
        "prompt": f"{stream} prompt {i}",
        "completion": f"answer {step}.{i} token=SECRET-{i} {tail}",
        "reward": float((i * 7) % PER_STEP + step),
        "i": float(i),
    }


def as_kept(fields: dict) -> dict:
    """What a kept sample must hold: redacted, then cut at LIMIT bytes with the mark."""
    out, cut = dict(fields), []
    for name in ("prompt", "completion"):
        text = out[name].replace("SECRET-", "[redacted]-")
        if len(text.encode()) > LIMIT:
            text = text.encode()[: LIMIT - len(TRUNCATION_MARK.encode())].decode() + TRUNCATION_MARK
            cut.append(name)
        out[name] = text
    out["truncated"] = ",".join(cut)
    return out


def row_key(row: dict) -> tuple:
    return (int(row["step"]), row["stream"], int(float(row["i"])))


def normal(row: dict) -> dict:
    """A row with numbers as floats and ``truncated`` as the comma-separated names."""
    out = {k: (float(v) if k in ("reward", "i") else v) for k, v in row.items()}
    if isinstance(out.get("truncated"), list):
        out["truncated"] = ",".join(out["truncated"])
    out.setdefault("truncated", "")
    out["step"] = int(out["step"])
    return out


@pytest.fixture
def redact():
    samples.set_redact(
        lambda fields: {k: v.replace("SECRET-", "[redacted]-") for k, v in fields.items()}
    )
    yield
    samples.set_redact(None)


def test_every_tracker_holds_the_same_bounded_redacted_rows(tmp_path, redact):
    run_dir = tmp_path / "exp" / "t1"
    config = {
        "experiment_name": "exp",
        "trial_name": "t1",
        "fileroot": str(tmp_path),
        "wandb": {"mode": "offline", "project": "rltel-test"},
        "tensorboard": {"path": str(run_dir / "tensorboard")},
        "swanlab": {"mode": "offline"},
        "samples": {"reservoir": 3, "extremes": 1, "max_text_bytes": LIMIT},
    }
    logger = StatsLogger(config)
    for step in STEPS:
        for i in range(PER_STEP):
            for stream in STREAMS[: 1 if i >= 2 else 2]:  # eval-rollout: 2 a step
                fields = logged(step, stream, i)
                samples.log_sample(
                    stream,
                    text={k: fields[k] for k in ("prompt", "completion")},
                    numbers={k: fields[k] for k in ("reward", "i")},
                )
        logger.commit(0, step, step, {"loss": float(step)})
    wandb_run = logger.fanout.built_by(wandb_sinks.FACTORY).run_dir
    swan_run = logger.fanout.built_by(swanlab_sinks.FACTORY).run_dir
    logger.close()

    jsonl = [normal(json.loads(line)) for line in (run_dir / "samples.jsonl").open()]
    trackers = {
        "jsonl": jsonl,
        "wandb": wandb_rows(wandb_run),
        "tensorboard": tensorboard_rows(run_dir / "tensorboard"),
        "swanlab": swanlab_rows(swan_run),
    }
    for name, rows in trackers.items():
        assert sorted(rows, key=row_key) == sorted(jsonl, key=row_key), name
    by_stream_step: dict[tuple, list[dict]] = {}
    for row in jsonl:
        by_stream_step.setdefault((row["stream"], row["step"]), []).append(row)
    assert sorted(by_stream_step) == sorted((s, t) for s in STREAMS for t in STEPS)
    for (stream, step), rows in by_stream_step.items():
        n = PER_STEP if stream == "rollout" else 2
        assert len(rows) <= min(n, 3 + 2) and len({row_key(r) for r in rows}) == len(rows)
        rewards = [logged(step, stream, i)["reward"] for i in range(n)]
        assert {min(rewards), max(rewards)} <= {r["reward"] for r in rows}
        for row in rows:
            expected = as_kept(logged(step, stream, int(row["i"])))
            assert {k: v for k, v in row.items() if k not in ("step", "stream")} == expected
    assert any(row["truncated"] == "completion" for row in jsonl)  # i = 0 is an extreme
    for name, path in [
        ("jsonl", run_dir / "samples.jsonl"),
        ("wandb", Path(wandb_run)),
        ("tensorboard", run_dir / "tensorboard"),
        ("swanlab", Path(swan_run)),
    ]:
        blob = b"".join(p.read_bytes() for p in _files(path))
        assert b"[redacted]-" in blob and b"SECRET-" not in blob, name


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]


def wandb_rows(run_dir: str) -> list[dict]:
    (path,) = glob.glob(os.path.join(run_dir, "*.wandb"))
    items = [r["history"]["item"] for r in inspect_wandb(path) if r["type"] == "history"]
    rows = []
    for item in items:
        for stream in STREAMS:
            key = f"samples/{stream}"
            if key + ".path" not in item:
                continue
            assert item[key + "._type"] == "table-file"
            with open(os.path.join(run_dir, "files", item[key + ".path"])) as f:
                table = json.load(f)
            for values in table["data"]:
                cells = dict(zip(table["columns"], values, strict=True))
                rows.append(normal({"step": item["global_step"], "stream": stream, **cells}))
    return rows


def tensorboard_rows(logdir: Path) -> list[dict]:
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    rows = []
    for stream in STREAMS:
        for event in acc.Tensors(f"samples/{stream}"):
            header, *body = tensor_util.make_ndarray(event.tensor_proto).tolist()
            columns = [c.decode() for c in header]
            for values in body:
                cells = dict(zip(columns, (v.decode() for v in values), strict=True))
                rows.append(normal({"step": event.step, "stream": stream, **cells}))
    return rows


def swanlab_rows(run_dir: str) -> list[dict]:
    store = DataStore()
    store.open_for_scan(os.path.join(run_dir, "backup.swanlab"))
    with ModelsParser() as parser:
        for record in store:
            parser.parse_record(record)
    medias = parser.get_parsed()[7]
    rows = []
    for media in medias:
        assert media.key in {f"samples/{s}" for s in STREAMS}
        for text in media.metric["data"]:
            row = normal(json.loads(text))
            assert row["step"] == media.step and media.key == f"samples/{row['stream']}"
            rows.append(row)
    return rows
