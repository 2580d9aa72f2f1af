"""StatsLogger as AReaL calls it: (config, ft_spec), progress line, state_dict, no silent no-op."""

from __future__ import annotations

import logging
import time

import pytest

from exporters.base import InMemorySink
from rltel.logger import STEP_METRIC, StatsLogger
from rltel.progress import FinetuneSpec
from telemetry.model.errors import ConfigError

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator as ea


def section(tmp_path, **extra) -> dict:
    return {"experiment_name": "exp", "trial_name": "t", "fileroot": str(tmp_path), **extra}


def progress(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Epoch ")]


def test_areal_call_with_ft_spec_logs_the_progress_line(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rltel.logger")
    spec = FinetuneSpec(total_train_epochs=2, dataset_size=64, train_batch_size=8)
    stats_logger = StatsLogger(section(tmp_path), spec)  # AReaL: StatsLogger(config, ft_spec)
    stats_logger.commit(0, 2, 2, {"loss": 1.0})
    stats_logger.commit(1, 7, 15, {"loss": 0.5})
    stats_logger.close()
    assert spec.steps_per_epoch == 8 and spec.total_train_steps == 16
    assert progress(caplog) == [
        "Epoch 1/2 Step 3/8 Train step 3/16 done.",
        "Epoch 2/2 Step 8/8 Train step 16/16 done.",
    ]


def test_without_ft_spec_the_line_has_no_totals(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rltel.logger")
    stats_logger = StatsLogger(section(tmp_path), sinks=[InMemorySink()])
    stats_logger.commit(0, 2, 2, {"loss": 1.0})
    stats_logger.close()
    assert progress(caplog) == ["Epoch 1 Step 3 Train step 3 done."]


def test_steps_never_go_back_as_in_areal(tmp_path):
    sink = InMemorySink()
    stats_logger = StatsLogger(section(tmp_path), sinks=[sink])
    stats_logger.commit(0, 5, 5, {"train": 1.0})
    stats_logger.commit(0, 5, 5, {"eval": 2.0})  # same global step: logged at the next one
    stats_logger.commit(0, 6, 3, [{"a": 1.0}, {"a": 2.0}])  # lower: continues after the last
    stats_logger.close()
    assert [s.step.global_step for s in sink.snapshots] == [5, 6, 7, 8]
    assert stats_logger.state_dict() == {"last_commit_step": 8}


def read_steps(logdir) -> dict[str, list[int]]:
    acc = ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_resumed_run_continues_its_steps_and_its_tensorboard_run(tmp_path):
    tb = str(tmp_path / "tb")
    config = section(tmp_path, tensorboard={"path": tb}, console={"enabled": False})
    first = StatsLogger(config)
    for step in range(3):
        first.commit(0, step, step, {"loss": float(step)})
    saved = first.state_dict()
    first.close()
    assert saved == {"last_commit_step": 2}

    # TensorBoard reads event files in name order: <seconds>.<host>.<pid>.<writer number in
    # the process>; a new process after recovery starts seconds later (here: the next second,
    # or writer 10 of this process would sort before writer 9)
    time.sleep(1.0 - time.time() % 1.0)
    resumed = StatsLogger(config)  # a new process after recovery, same config
    resumed.load_state_dict(saved)
    resumed.commit(0, 2, 2, {"loss": 9.0})  # the recovered trainer replays step 2
    resumed.commit(0, 3, 3, {"loss": 3.0})
    resumed.close()
    steps = read_steps(tb)
    assert steps["loss"] == [0, 1, 2, 3, 4]
    assert steps[STEP_METRIC] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("state", [{}, {"last_commit_step": "2"}, [], {"last_commit_step": True}])
def test_load_state_dict_rejects_a_bad_state(tmp_path, state):
    stats_logger = StatsLogger(section(tmp_path), sinks=[InMemorySink()])
    with pytest.raises(ConfigError, match="expected an int last_commit_step"):
        stats_logger.load_state_dict(state)
    stats_logger.close()


def test_no_sink_and_no_endpoint_warns_once_naming_the_keys(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rltel.logger")
    stats_logger = StatsLogger(section(tmp_path, console={"enabled": False}))
    stats_logger.commit(0, 0, 0, {"x": 1.0})
    stats_logger.commit(0, 1, 1, {"x": 1.0})
    stats_logger.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for key in (
        "stats_logger.console.enabled",
        "stats_logger.tensorboard.path",
        "stats_logger.wandb.mode",
        "stats_logger.otlp.endpoint",
    ):
        assert key in warning


def test_the_default_config_prints_the_console_table(tmp_path, capsys, caplog):
    caplog.set_level(logging.WARNING, logger="rltel.logger")
    stats_logger = StatsLogger(section(tmp_path))
    stats_logger.commit(0, 0, 0, {"loss": 1.5})
    stats_logger.close()
    assert "loss" in capsys.readouterr().out and "1.5" not in caplog.text
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
