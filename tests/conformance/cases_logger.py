"""StatsLogger cases: AReaL's own StatsLogger (areal/utils/stats_logger.py, run in this
process by :mod:`tests.conformance.areal_logger`) and rltel's, given the same AReaL config objects
(``BaseExperimentConfig``), AReaL's ``FinetuneSpec`` and the same commits, compared by what
each wrote: TensorBoard ``(tag, step, value)`` rows read back by TensorBoard's reader, W&B
offline rows read by W&B's CLI, the progress lines and ``state_dict()``.

rltel's own heartbeat ``rltel/step`` (every trainer export) and W&B's hidden x-axis
``global_step`` are left out of the equal cases; ``logger_added_keys`` shows them.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.conformance import areal_logger as al
from tests.conformance.cases import Case

STEP_TAG = "rltel/step"
W_AND_B_AXIS = "global_step"


def record_step(tracker: Any, step: int) -> None:
    """One PPO step's recording through AReaL's stats_tracker API (actor and workflow)."""
    mask = torch.tensor([True, True, False, True])
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        tracker.denominator(n_valid_tokens=mask)
        loss = torch.tensor([0.5, 1.0, 8.0, 1.5]) * (step + 1)
        tracker.stat(loss=loss, denominator="n_valid_tokens")
        tracker.scalar(lr=0.25 / (step + 1), grad_norm=2.0 + step)
    tracker.get("rollout").scalar(reward=0.5 * step)
    tracker.get("rollout").scalar(reward=1.0)


@cache
def areal_exports(steps: int = 3) -> tuple[dict, ...]:
    """``export_all()`` of AReaL's own tracker after each of ``steps`` recorded steps."""
    tracker = al.areal_tracker()
    exports = []
    for step in range(steps):
        record_step(tracker, step)
        exports.append(tracker.export_all())
    return tuple(exports)


def tracker_commits() -> list[al.Commit]:
    return [(0, step, step, data) for step, data in enumerate(areal_exports())]


def list_commits() -> list[al.Commit]:
    return [(0, 0, 4, list(areal_exports()))]


def back_commits() -> list[al.Commit]:
    return [
        (0, 5, 5, {"train/x": 1.0}),
        (0, 5, 5, {"eval/x": 2.0}),
        (0, 3, 3, [{"train/x": 3.0}, {"train/x": 4.0}]),
        (0, 7, 7, {}),
        (0, 8, 8, {"train/x": 5.0}),
    ]


def resume(stats_logger: Any) -> None:
    stats_logger.load_state_dict({"last_commit_step": 4})
    stats_logger.commit(0, 2, 2, {"train/x": 1.0})
    stats_logger.commit(0, 3, 3, {"train/x": 2.0})


def progress_commits() -> list[al.Commit]:
    data = {"train/x": 1.0}
    return [(0, 2, 2, data), (1, 7, 15, data), (0, 0, 4, [data, data])]


def value_commits() -> list[al.Commit]:
    values = {
        "int": 3,
        "numpy_float32": np.float32(0.1),
        "tensor": torch.tensor(2.5),
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "big": 1e30,
    }
    return [(0, 0, 0, values)]


def tag_commits() -> list[al.Commit]:
    return [(0, 0, 0, {"eval-rollout/pass@4": 0.5, "a b": 1.0, "x:y": 3.0})]


def wandb_commits() -> list[al.Commit]:
    first, second, _ = areal_exports()
    return [(0, 0, 0, first), (0, 1, 1, second), (0, 1, 1, {"eval/x": 0.5}), (0, 3, 3, {})]


@cache
def wandb_run(side: str) -> dict[str, Any]:
    """What each logger wrote with W&B offline (run once per side)."""
    run = al.run_areal if side == "areal" else al.run_rltel
    return run(wandb_commits(), wandb_mode="offline")


def tensorboard(run: dict[str, Any]) -> list[tuple[str, int, float]]:
    return al.without(run["tensorboard"], STEP_TAG)


def rows_and_state(run: dict[str, Any]) -> dict[str, Any]:
    return {"tensorboard": tensorboard(run), "state": run["state"]}


def wandb_rows(side: str) -> list[dict[str, Any]]:
    hidden = (STEP_TAG, W_AND_B_AXIS)
    rows = wandb_run(side)["wandb"]
    return [{k: v for k, v in row.items() if k not in hidden} for row in rows]


def added_keys(side: str) -> dict[str, list[str]]:
    run = wandb_run(side)
    return {
        "tensorboard": sorted({row[0] for row in run["tensorboard"]}),
        "wandb": sorted({key for row in run["wandb"] for key in row}),
    }


def run_identity(side: str) -> dict[str, Any]:
    run = dict(wandb_run(side)["wandb_run"])
    run["config"] = [key for key in run["config"] if key not in ("stats_logger", "version_info")]
    del run["stats_logger"]
    return run


def run_config(side: str) -> dict[str, Any]:
    run = wandb_run(side)["wandb_run"]
    return {"version_info": "version_info" in run["config"], "stats_logger": run["stats_logger"]}


def areal_section_as_config() -> str:
    """AReaL's StatsLogger given ``config.stats_logger`` (the section): the error it raises."""
    module = al.stats_logger_module()
    try:
        module.StatsLogger(al.section(Path("unused")), al.finetune_spec())
    except ValueError as exc:
        return f"ValueError: {exc}"
    return "accepted"


def rltel_section_as_config() -> list[tuple[str, int, float]]:
    return tensorboard(al.run_rltel([(0, 0, 0, {"train/x": 1.0})], config=al.section))


def changed_export(tracker: Any) -> dict:
    """An export changed before commit, as trainers do: a merged rollout dict and a set key."""
    record_step(tracker, 1)
    stats = tracker.export_all()
    stats.update({"rollout/reward": 0.125, "rollout/extra": 3.0})
    stats["ppo_actor/update/lr"] = 0.5
    del stats["ppo_actor/update/grad_norm"]
    return stats


def areal_changed_export() -> list[tuple[str, int, float]]:
    stats = changed_export(al.areal_tracker())
    return al.run_areal([(0, 0, 0, stats)])["tensorboard"]


def rltel_changed_export() -> list[tuple[str, int, float]]:
    from telemetry import stats_tracker

    stats_tracker.export_all()  # start from an empty tracker
    return tensorboard(al.run_rltel([(0, 0, 0, changed_export(stats_tracker))]))


AREAL_SECTION_KEYS = [
    ["experiment_name", None],
    ["fileroot", None],
    ["swanlab", ["api_key", "config", "logdir", "mode", "name", "project"]],
    ["tensorboard", ["path"]],
    ["trackio", ["mode", "name", "project", "space_id"]],
    ["trial_name", None],
    [
        "wandb",
        [
            "config",
            "entity",
            "group",
            "id_suffix",
            "job_type",
            "mode",
            "name",
            "notes",
            "project",
            "tags",
            "wandb_api_key",
            "wandb_base_url",
        ],
    ],
]
RLTEL_SECTION_KEYS = [
    ["console", ["enabled", "width"]],
    ["experiment_name", None],
    ["fileroot", None],
    ["hardware", ["enabled", "nvml", "phase_memory"]],
    ["heartbeat", ["enabled", "interval_s", "stall_floor_s"]],
    [
        "otlp",
        [
            "endpoint",
            "insecure",
            "max_points_per_request",
            "queue_size",
            "spool_dir",
            "spool_limit_bytes",
            "timeout",
            "tls",
        ],
    ],
    [
        "prometheus",
        [
            "cert_file",
            "enabled",
            "expire_seconds",
            "host",
            "key_file",
            "port",
            "series_limit",
            "token_file",
        ],
    ],
    ["samples", ["enabled", "extremes", "jsonl", "max_text_bytes", "reservoir", "reward_key"]],
    ["swanlab", ["config", "logdir", "mode", "name", "project"]],
    ["tensorboard", ["path"]],
    [
        "tracing",
        [
            "enabled",
            "max_queue",
            "output_dir",
            "record_timing",
            "sample_rate",
            "save_interval",
            "session_flush_threshold",
            "sessions",
        ],
    ],
    ["trackio", ["dir", "mode", "name", "project", "space_id"]],
    ["trial_name", None],
    [
        "wandb",
        [
            "config",
            "entity",
            "group",
            "id_suffix",
            "job_type",
            "mode",
            "name",
            "notes",
            "project",
            "tags",
            "wandb_base_url",
        ],
    ],
]
AREAL_KEYS = ["eval/x", "ppo_actor/update/grad_norm", "ppo_actor/update/loss/avg"]
AREAL_KEYS += ["ppo_actor/update/loss/max", "ppo_actor/update/loss/min", "ppo_actor/update/lr"]
AREAL_KEYS += ["ppo_actor/update/n_valid_tokens", "rollout/reward"]

CASES: list[Case] = [
    Case(
        name="logger_tracker_export",
        call="for s in range(3): logger.commit(0, s, s, stats_tracker.export_all())",
        areal=lambda: al.run_areal(tracker_commits())["tensorboard"],
        rltel=lambda: tensorboard(al.run_rltel(tracker_commits())),
    ),
    Case(
        name="logger_list_of_dicts",
        call="logger.commit(0, 0, 4, [export_0, export_1, export_2])",
        areal=lambda: al.run_areal(list_commits())["tensorboard"],
        rltel=lambda: tensorboard(al.run_rltel(list_commits())),
    ),
    Case(
        name="logger_steps_never_go_back",
        call="commit(0,5,5,a); commit(0,5,5,b); commit(0,3,3,[c,d]); commit(0,7,7,{}); "
        "commit(0,8,8,e); state_dict()",
        areal=lambda: rows_and_state(al.run_areal(back_commits())),
        rltel=lambda: rows_and_state(al.run_rltel(back_commits())),
    ),
    Case(
        name="logger_load_state_dict",
        call="logger.load_state_dict({'last_commit_step': 4}); commit(0,2,2,a); commit(0,3,3,b)",
        areal=lambda: rows_and_state(al.run_areal(resume)),
        rltel=lambda: rows_and_state(al.run_rltel(resume)),
    ),
    Case(
        name="logger_progress_line",
        call="StatsLogger(config, FinetuneSpec(2, 64, 8)): commit(0,2,2,d); commit(1,7,15,d); "
        "commit(0,0,4,[d,d])",
        areal=lambda: al.run_areal(progress_commits())["lines"],
        rltel=lambda: al.run_rltel(progress_commits())["lines"],
    ),
    Case(
        name="logger_value_types",
        call="logger.commit(0, 0, 0, {int, np.float32, 0-d tensor, nan, inf, -inf, 1e30})",
        areal=lambda: al.run_areal(value_commits())["tensorboard"],
        rltel=lambda: tensorboard(al.run_rltel(value_commits())),
    ),
    Case(
        name="logger_tensorboard_tags",
        call="logger.commit(0, 0, 0, {'eval-rollout/pass@4', 'a b', 'x:y'})",
        areal=lambda: al.run_areal(tag_commits())["tensorboard"],
        rltel=lambda: tensorboard(al.run_rltel(tag_commits())),
    ),
    Case(
        name="logger_export_changed_before_commit",
        call="stats = export_all(); stats.update(rollout_stats); stats[k] = v; del stats[j]; "
        "logger.commit(0, 0, 0, stats)",
        areal=areal_changed_export,
        rltel=rltel_changed_export,
    ),
    Case(
        name="logger_wandb_offline_rows",
        call="wandb.mode=offline: commit(0,0,0,e0); commit(0,1,1,e1); commit(0,1,1,{eval/x}); "
        "commit(0,3,3,{})",
        areal=lambda: wandb_rows("areal"),
        rltel=lambda: wandb_rows("rltel"),
    ),
    Case(
        name="logger_wandb_run",
        call="StatsLogger(BaseExperimentConfig(...), ft_spec) with wandb.mode=offline",
        areal=lambda: run_identity("areal"),
        rltel=lambda: run_identity("rltel"),
    ),
    Case(
        name="logger_added_keys",
        call="the TensorBoard tags and W&B row keys of logger_wandb_offline_rows",
        areal=lambda: added_keys("areal"),
        rltel=lambda: added_keys("rltel"),
        why="rltel adds its heartbeat gauge rltel/step to every trainer export (the step "
        "the stall alert watches, docs/metrics.md), and W&B's hidden x-axis global_step "
        "(define_metric) to every train row",
        expected=(
            {"tensorboard": AREAL_KEYS, "wandb": ["_step", *AREAL_KEYS]},
            {
                "tensorboard": sorted([*AREAL_KEYS, STEP_TAG]),
                "wandb": sorted(["_step", *AREAL_KEYS, W_AND_B_AXIS, STEP_TAG]),
            },
        ),
    ),
    Case(
        name="logger_wandb_run_config",
        call="the W&B run config of logger_wandb_run: version_info, the stats_logger section",
        areal=lambda: run_config("areal"),
        rltel=lambda: run_config("rltel"),
        why="rltel logs the whole experiment config with its validated stats_logger section: "
        "secrets removed (wandb_api_key, swanlab.api_key), rltel's console, otlp, "
        "prometheus, samples, heartbeat, hardware and tracing sections added, trackio's "
        "data directory (dir) added; AReaL's version_info describes AReaL's own git "
        "checkout and is not logged",
        expected=(
            {"version_info": True, "stats_logger": AREAL_SECTION_KEYS},
            {"version_info": False, "stats_logger": RLTEL_SECTION_KEYS},
        ),
    ),
    Case(
        name="logger_section_as_config",
        call="StatsLogger(config.stats_logger, ft_spec).commit(0, 0, 0, {'train/x': 1.0})",
        areal=areal_section_as_config,
        rltel=rltel_section_as_config,
        why="rltel accepts the stats_logger section itself (AReaL's earlier signature, and "
        "every config form docs/areal-migration.md lists); AReaL 1.0.4 raises",
        expected=(
            "ValueError: Passing config.stats_logger as the config is deprecated. "
            "Please pass the full config instead.",
            [("train/x", 0, 1.0)],
        ),
    ),
]
