"""Several runs through one collector: each gets its own TensorBoard and SwanLab run."""

from __future__ import annotations

import glob
import os

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("swanlab")

from swanlab.log.backup.datastore import DataStore
from swanlab.log.backup.models import ModelsParser
from tensorboard.backend.event_processing import event_accumulator as ea

from collector.config import from_dict
from collector.server import CollectorServer
from telemetry.logger import StatsLogger

TRIALS = ("a", "b")


def tensorboard_series(path: str, key: str) -> dict[int, float]:
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {event.step: event.value for event in acc.Scalars(key)}


def swanlab_series(logdir: str, key: str) -> tuple[str, dict[int, float]]:
    (backup,) = glob.glob(os.path.join(logdir, "**", "backup.swanlab"), recursive=True)
    store = DataStore()
    store.open_for_scan(backup)
    with ModelsParser() as parser:
        for record in store:
            parser.parse_record(record)
    _, _, experiment, _, _, _, scalars, _, _ = parser.get_parsed()
    return experiment.name, {s.step: s.metric["data"] for s in scalars if s.key == key}


def test_each_run_gets_its_own_step_based_sinks(tmp_path):
    tb, swan = str(tmp_path / "tb"), str(tmp_path / "swan")
    server = CollectorServer(
        from_dict(
            {
                "receiver": {"port": 0},
                "sinks": {
                    "fileroot": str(tmp_path / "files"),
                    "prometheus": {"port": 0},
                    "tensorboard": {"path": tb},
                    "swanlab": {"mode": "offline", "logdir": swan},
                },
            }
        )
    )
    server.start()
    try:
        loggers = [
            StatsLogger(
                {
                    "experiment_name": "exp",
                    "trial_name": trial,
                    "fileroot": str(tmp_path / "client" / trial),
                    "otlp": {"endpoint": server.endpoint},
                }
            )
            for trial in TRIALS
        ]
        for step in (1, 2, 3):
            for index, logger in enumerate(loggers):
                logger.commit(0, step, step, {"ppo_actor/update/loss": step + 10.0 * index})
        for logger in loggers:
            logger.close(timeout_s=30)
            assert logger.health()["otlp"]["points_failed"] == 0
    finally:
        server.stop(60)
    for index, trial in enumerate(TRIALS):
        expected = {step: step + 10.0 * index for step in (1, 2, 3)}
        path = os.path.join(tb, "exp", trial)
        assert tensorboard_series(path, "ppo_actor/update/loss") == pytest.approx(expected)
        name, series = swanlab_series(os.path.join(swan, "exp", trial), "ppo_actor/update/loss")
        assert name == f"exp_{trial}"
        assert series == pytest.approx(expected)
