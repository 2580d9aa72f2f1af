"""Port test: an AReaL-style script and YAML run unchanged but for imports; sinks read back."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trackio_log import series, trackio_run
from tests.wandb_log import inspect_wandb

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator as ea

HERE = Path(__file__).resolve().parent / "areal_port"
REPO = HERE.parents[2]
STEP_KEYS = {
    "ppo_actor/update/loss/avg",
    "ppo_actor/update/loss/min",
    "ppo_actor/update/loss/max",
    "ppo_actor/update/task_reward/avg",
    "ppo_actor/update/task_reward/min",
    "ppo_actor/update/task_reward/max",
    "ppo_actor/update/n_valid_tokens",
    "ppo_actor/update/n_seqs",
    "timeperf/train_step",  # AReaL: timing keys ignore the scope
    "timeperf/rollout",
    "rollout/reward",
    "lr",
    "rltel/step",
}
EVAL_KEYS = {"eval-rollout/reward", "timeperf/eval"}
# rltel's documented additions: the straggler view of every timing (telemetry.record.rank_spread).
SPREAD = ("rank_min", "rank_max", "slowest_rank")


def with_spread(keys: set[str]) -> set[str]:
    timings = {k for k in keys if k.startswith("timeperf/")}
    return keys | {f"{k}/{suffix}" for k in timings for suffix in SPREAD}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("areal")
    env = {**os.environ, "PORT_TEST_ROOT": str(root), "PYTHONPATH": str(REPO), "WANDB_SILENT": "1"}
    out = subprocess.run(
        [sys.executable, str(HERE / "train.py"), str(HERE / "gsm8k_grpo.yaml")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return root, out


def wandb_records(root: Path) -> list[dict]:
    (path,) = glob.glob(str(root / "gsm8k-grpo" / "trial0" / "wandb" / "offline-run-*" / "*.wandb"))
    return inspect_wandb(path)


def test_wandb_run_is_named_and_configured_as_areal_does(run):
    root, _ = run
    records = wandb_records(root)
    (info,) = [r["run"] for r in records if r["type"] == "run"]
    assert info["run_id"] == "gsm8k-grpo_trial0_train"
    assert info["project"] == "gsm8k-grpo"  # AReaL: wandb.project or experiment_name
    assert info["run_group"] == "gsm8k-grpo_trial0"  # AReaL: <experiment>_<trial>
    assert info["display_name"] == "trial0"  # AReaL: wandb.name or trial_name
    config = info["config"]["update"]
    logged = (
        {k: json.loads(v["value_json"]) for k, v in config.items()}
        if "seed" not in config
        else config
    )
    assert logged["seed"] == 1 and logged["actor"]["path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert logged["stats_logger"]["fileroot"] == str(root)
    assert "not-a-real-key" not in json.dumps(records)


def test_wandb_history_has_areal_keys_at_areal_steps(run):
    root, _ = run
    rows = {
        r["history"]["item"]["_step"]: r["history"]["item"]
        for r in wandb_records(root)
        if r["type"] == "history"
    }
    assert sorted(rows) == [0, 1, 2, 3]
    for step, item in rows.items():
        keys = {k for k in item if not k.startswith("_") and k != "global_step"}
        expected = with_spread(STEP_KEYS | (EVAL_KEYS if step in (1, 3) else set()))
        assert keys == expected, step
        assert item["rltel/step"] == step
        assert item["ppo_actor/update/loss/avg"] == pytest.approx(0.5 + step)
        assert not any(k.endswith("__count") for k in item)


def test_trackio_has_areal_keys_at_areal_steps(run):
    root, _ = run
    directory = root / "gsm8k-grpo" / "trial0" / "trackio"
    logged = trackio_run(directory, "gsm8k-grpo", "trial0")  # AReaL: experiment, trial names
    found = series(logged["rows"])
    assert found.keys() == with_spread(STEP_KEYS | EVAL_KEYS)
    for key in with_spread(STEP_KEYS):
        assert sorted(found[key]) == [0, 1, 2, 3], key
    assert sorted(found["eval-rollout/reward"]) == [1, 3]
    loss = found["ppo_actor/update/loss/avg"]
    assert loss == {step: [pytest.approx(0.5 + step)] for step in range(4)}
    assert logged["config"]["seed"] == 1  # the whole experiment config, as AReaL logs it
    assert "not-a-real-key" not in json.dumps(logged)


def test_tensorboard_has_areal_keys_and_steps(run):
    root, _ = run
    acc = ea.EventAccumulator(str(root / "tensorboard" / "gsm8k-grpo" / "trial0"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags >= STEP_KEYS | EVAL_KEYS
    assert [e.step for e in acc.Scalars("ppo_actor/update/loss/avg")] == [0, 1, 2, 3]
    assert [e.step for e in acc.Scalars("eval-rollout/reward")] == [1, 3]


def test_progress_line_and_console_table(run):
    _, out = run
    assert "ppo_actor/update/loss/avg" in out.stdout  # the console table (default on)
    assert "stats_logger.trackio" not in out.stderr  # taken: the Trackio sink
    assert out.stderr.count("AReaL keys that rltel does not implement") == 1  # the evaluator's
