"""W&B sink against real offline runs, read back with W&B's own ``wandb leet inspect --json``."""

from __future__ import annotations

import glob
import json
import os
import re

import numpy as np
import pytest

from tests.wandb_log import inspect_wandb

pytest.importorskip("wandb")

from exporters.base import ExportResult
from exporters.factory import BuildContext
from exporters.wandb import TABLE_KEY, WandbSink
from telemetry.config import StatsLoggerConfig, WandBConfig
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot, Step
from tests.fresh_python import run_python


def make_config(tmp_path, **wandb_fields) -> StatsLoggerConfig:
    fields = {"mode": "offline", "project": "rltel-test", **wandb_fields}
    return StatsLoggerConfig(
        experiment_name="exp",
        trial_name="t1",
        fileroot=str(tmp_path / "root"),
        wandb=WandBConfig(**fields),
    )


def contract_config(tmp_path, stack):
    """The W&B sink of the sink contract (tests/exporters/test_base.py)."""
    return make_config(tmp_path), BuildContext()


def read_records(sink: WandbSink) -> list[dict]:
    """Every record of the run's ``.wandb`` transaction log, decoded by W&B's CLI."""
    (path,) = glob.glob(os.path.join(sink.run_dir, "*.wandb"))
    return inspect_wandb(path)


def history(records: list[dict]) -> list[dict]:
    return [r["history"]["item"] for r in records if r["type"] == "history"]


def moe_points(tokens: np.ndarray) -> list:
    """Per-expert tokens/load_percent gauges and per-layer max_over_ideal of a loads matrix."""
    points = []
    for layer, row in enumerate(tokens):
        for expert, count in enumerate(row):
            attrs = (("layer", layer), ("expert", expert))
            share = 100.0 * count / row.sum()
            points.append(
                Gauge("moe_balance/tokens", float(count), unit="{token}", attributes=attrs)
            )
            points.append(Gauge("moe_balance/load_percent", float(share), attributes=attrs))
        ratio = row.max() / (row.sum() / len(row))
        points.append(
            Gauge("moe_balance/max_over_ideal", float(ratio), attributes=(("layer", layer),))
        )
    return points


def train_snapshot(
    step: int, rng: np.random.Generator, tokens: np.ndarray
) -> tuple[Snapshot, dict]:
    """A train snapshot and the flat dict W&B must show for it, computed with numpy."""
    values = rng.normal(size=50)
    mask = rng.random(50) < 0.6
    kept = values[mask]
    hist = Histogram(
        "ppo_actor/update/loss",
        int(mask.sum()),
        float(kept.sum()),
        float(kept.min()),
        float(kept.max()),
    )
    lr = ScalarMean("ppo_actor/update/lr", 1e-5 * step, count=4)
    tokens_total = Counter("train_perf/tokens", 1000.0 * step, unit="{token}")
    points = (hist, lr, tokens_total, *moe_points(tokens))
    expected = {
        "ppo_actor/update/loss/avg": kept.mean(),
        "ppo_actor/update/loss/min": kept.min(),
        "ppo_actor/update/loss/max": kept.max(),
        "ppo_actor/update/lr": 1e-5 * step,
        "train_perf/tokens": 1000.0 * step,
    }
    for layer, row in enumerate(tokens):
        expected[f"moe_balance/layer_{layer}/max_over_ideal"] = row.max() / row.mean()
    snap = Snapshot(points, step=Step(0, step, step), resource=(("rltel.role", "trainer"),))
    return snap, expected


def test_train_keys_values_steps_and_expert_table(tmp_path):
    rng = np.random.default_rng(0)
    sink = WandbSink(make_config(tmp_path, tags=["a", "b"], group="g", job_type="train"))
    expected_rows, expected_tables = {}, {}
    for step in (1, 2, 4):
        tokens = rng.integers(1, 100, size=(2, 3)).astype(float)
        snap, expected = train_snapshot(step, rng, tokens)
        assert sink.export(snap) is ExportResult.SUCCESS
        expected_rows[step] = expected
        expected_tables[step] = [
            [
                layer,
                expert,
                tokens[layer, expert],
                100 * tokens[layer, expert] / tokens[layer].sum(),
            ]
            for layer in range(2)
            for expert in range(3)
        ]
    sink.shutdown()
    sink.shutdown()
    run_folder = os.path.join(str(tmp_path / "root"), "exp", "t1", "wandb")
    assert os.path.commonpath([sink.run_dir, run_folder]) == run_folder
    assert sink.run_dir.endswith("exp_t1_train")
    records = read_records(sink)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["run_id"] == "exp_t1_train"
    assert run["project"] == "rltel-test"
    assert run["tags"] == ["a", "b"] and run["run_group"] == "g" and run["job_type"] == "train"
    rows = {item["_step"]: item for item in history(records)}
    assert sorted(rows) == [1, 2, 4]
    for step, expected in expected_rows.items():
        item = rows[step]
        assert item["global_step"] == step
        scalars = {k: v for k, v in item.items() if not k.startswith(("_", TABLE_KEY, "global"))}
        assert scalars.keys() == expected.keys()
        for key, value in expected.items():
            assert scalars[key] == pytest.approx(value, rel=1e-12), key
        assert not any(k.endswith("__count") for k in item)
        assert not any(re.search(r"/expert_\d", k) for k in item)
        assert item[TABLE_KEY + "._type"] == "table-file"
        table_path = os.path.join(sink.run_dir, "files", item[TABLE_KEY + ".path"])
        with open(table_path) as f:
            table = json.load(f)
        assert table["columns"] == ["layer", "expert", "tokens", "load_percent"]
        np.testing.assert_allclose(np.array(table["data"]), np.array(expected_tables[step]))


def test_out_of_order_stream_steps_are_kept(tmp_path):
    sink = WandbSink(make_config(tmp_path))
    rng = np.random.default_rng(1)
    tokens = np.ones((1, 2))
    sent = []  # (stream, step or None, value)

    def stream(name: str, step: int | None, value: float) -> None:
        snap = Snapshot(
            (ScalarMean(f"{name}/reward", value, count=3),),
            step=None if step is None else Step(0, step, step),
            stream=name,
        )
        assert sink.export(snap) is ExportResult.SUCCESS
        sent.append((name, step, value))

    sink.export(train_snapshot(5, rng, tokens)[0])
    stream("rollout", 7, 0.7)
    stream("rollout", 3, 0.3)  # older than the last train step: W&B alone would drop it
    stream("eval", 2, 0.2)
    stream("rollout", 3, 0.31)  # same step again: its own row, not an overwrite
    stream("rollout", None, 0.9)
    stream("eval", None, 0.8)
    sink.export(train_snapshot(6, rng, tokens)[0])
    stream("rollout", 1, 0.1)
    sink.export(train_snapshot(7, rng, tokens)[0])
    sink.shutdown()
    records = read_records(sink)
    items = history(records)
    got = sorted(
        (name, item[f"{name}/step"], item[f"{name}/reward"])
        for item in items
        for name in ("rollout", "eval")
        if f"{name}/reward" in item
    )
    seq = {"rollout": 0, "eval": 0}  # a stepless snapshot gets its stream's sequence number
    want = []
    for name, step, value in sent:
        if step is None:
            step, seq[name] = seq[name], seq[name] + 1
        want.append((name, step, value))
    assert got == sorted(want)
    train_steps = sorted(item["global_step"] for item in items if "global_step" in item)
    assert train_steps == [5, 6, 7]
    # W&B's own row index equals global_step until streams need rows of their own; from
    # then on rows run ahead and the charts' x-axis is the logged global_step.
    train_rows = [item["_step"] for item in items if "global_step" in item]
    assert train_rows[0] == 5 and all(r >= s for r, s in zip(train_rows, [5, 6, 7]))
    steps = [item["_step"] for item in items]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    axes = {
        r["metric"]["name"]: r["metric"].get("step_metric")
        for r in records
        if r["type"] == "metric" and "name" in r["metric"]
    }
    assert axes["rollout/reward"] == "rollout/step"
    assert axes["eval/reward"] == "eval/step"
    assert axes["ppo_actor/update/lr"] == "global_step"


def test_config_uploaded_without_secrets(tmp_path):
    sink = WandbSink(make_config(tmp_path, wandb_api_key="secret-key-123", notes="n"))
    sink.shutdown()
    records = read_records(sink)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    config = run["config"]["update"]
    assert config["experiment_name"] == "exp" and config["trial_name"] == "t1"
    assert config["wandb"]["mode"] == "offline"
    assert "wandb_api_key" not in config["wandb"]
    assert "secret-key-123" not in json.dumps(records)


def test_disabled_never_imports_or_inits_wandb(tmp_path):
    code = (
        "import sys\n"
        "from exporters.wandb import WandbSink\n"
        "from telemetry.config import StatsLoggerConfig\n"
        "from telemetry.model.snapshot import Gauge, Snapshot\n"
        f"sink = WandbSink(StatsLoggerConfig(fileroot={str(tmp_path / 'r')!r}))\n"
        "assert sink.export(Snapshot((Gauge('a', 1.0),))).value == 'success'\n"
        "sink.shutdown()\n"
        "print('wandb' in sys.modules)\n"
    )
    assert run_python(code).strip() == "False"
    assert not (tmp_path / "r").exists()


def test_unwritable_fileroot_fails_at_construction(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    config = StatsLoggerConfig(fileroot=str(blocker), wandb=WandBConfig(mode="offline"))
    with pytest.raises(OSError, match="cannot create run directory"):
        WandbSink(config)


def test_export_after_shutdown_is_a_permanent_failure_not_an_exception(tmp_path):
    sink = WandbSink(make_config(tmp_path))
    sink.shutdown()
    assert (
        sink.export(Snapshot((Gauge("a", 1.0),), step=Step(0, 1, 1)))
        is ExportResult.PERMANENT_FAILURE
    )


def test_expert_table_longer_than_wandb_limit_is_split_by_layer(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setattr(wandb.Table, "MAX_ROWS", 7)  # a 3-expert model: two layers per part
    tokens = np.arange(1.0, 16.0).reshape(5, 3)
    sink = WandbSink(make_config(tmp_path))
    snap = Snapshot(tuple(moe_points(tokens)), step=Step(0, 1, 1))
    assert sink.export(snap) is ExportResult.SUCCESS
    sink.shutdown()
    (item,) = history(read_records(sink))
    rows = []
    for key, size in ((TABLE_KEY, 6), (TABLE_KEY + "_part1", 6), (TABLE_KEY + "_part2", 3)):
        with open(os.path.join(sink.run_dir, "files", item[key + ".path"])) as f:
            part = json.load(f)["data"]
        assert len(part) == size, key
        rows.extend(part)
    assert TABLE_KEY + "_part3._type" not in item
    want = [
        [layer, expert, tokens[layer, expert], 100 * tokens[layer, expert] / tokens[layer].sum()]
        for layer in range(5)
        for expert in range(3)
    ]
    np.testing.assert_allclose(np.array(rows), np.array(want))
