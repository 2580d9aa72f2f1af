"""Several runs through one collector: each gets its own TensorBoard and SwanLab run, in its
run directory; a sink that cannot start refuses its run retryably until it can, and shows in
the self-metrics."""

from __future__ import annotations

import glob
import os
import time

import grpc
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("swanlab")

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from swanlab.log.backup.datastore import DataStore
from swanlab.log.backup.models import ModelsParser
from tensorboard.backend.event_processing import event_accumulator as ea

from collector.config import from_dict
from collector.server import CollectorServer
from collector.sinks import RunSinkFactory
from rltel.logger import StatsLogger
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.encode import encode
from telemetry.otlp.wire import PUSHBACK_KEY
from tests.trackio_log import series as series_of
from tests.trackio_log import trackio_run
from tests.wandb_log import inspect_wandb

from .conftest import samples, scrape

TRIALS = ("a", "b")
METHOD = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
RUN = (("rltel.experiment", "exp"), ("rltel.trial", "t1"), ("rltel.rank", 0))


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
    tb, swan, track = str(tmp_path / "tb"), str(tmp_path / "swan"), str(tmp_path / "track")
    server = CollectorServer(
        from_dict(
            {
                "receiver": {"port": 0},
                "sinks": {
                    "fileroot": str(tmp_path / "files"),
                    "prometheus": {"port": 0},
                    "tensorboard": {"path": tb},
                    "swanlab": {"mode": "offline", "logdir": swan},
                    "trackio": {"mode": "local", "dir": track},
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
        run_dir = tmp_path / "files" / "exp" / trial  # every file of the run is in it
        for root, entry in ((tb, "tensorboard"), (swan, "swanlog"), (track, "trackio")):
            link = os.path.join(root, "exp", trial)  # the configured root leads there
            assert os.path.islink(link) and os.path.samefile(link, run_dir / entry)
            assert not os.path.isabs(os.readlink(link))  # right wherever the tree is mounted
        for path in (run_dir / "tensorboard", os.path.join(tb, "exp", trial)):
            assert tensorboard_series(str(path), "ppo_actor/update/loss") == pytest.approx(expected)
        name, series = swanlab_series(str(run_dir / "swanlog"), "ppo_actor/update/loss")
        assert name == f"exp_{trial}"
        assert series == pytest.approx(expected)
        logged = series_of(trackio_run(run_dir / "trackio", "exp", trial)["rows"])
        assert logged["ppo_actor/update/loss"] == {s: [v] for s, v in expected.items()}


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_run_whose_sink_cannot_start_is_refused_retryably_and_arrives_once_fixed(
    start_collector, tmp_path
):
    files = tmp_path / "files"
    blocked = files / "exp" / "t1" / "tensorboard"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the TensorBoard directory goes")
    sinks = {"fileroot": str(files), "tensorboard": {"path": str(files)}}
    server = start_collector(sinks={**sinks, "wandb": {"mode": "offline"}})
    snapshot = Snapshot((Gauge("ppo_actor/update/loss", 0.5),), Step(0, 0, 0), RUN)
    (request,) = encode(snapshot)
    with grpc.insecure_channel(server.endpoint) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None)
        with pytest.raises(grpc.RpcError) as refused:
            call(encode_metrics(request).SerializeToString(), timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, refused.value
    assert "sink tensorboard failed to start" in refused.value.details()
    assert PUSHBACK_KEY in dict(refused.value.trailing_metadata())  # retry, keep the data
    logger = StatsLogger(
        {
            "experiment_name": "exp",
            "trial_name": "t1",
            "fileroot": str(tmp_path / "client"),
            "otlp": {"endpoint": server.endpoint},
        }
    )
    for step in (1, 2):
        logger.commit(0, step, step, {"ppo_actor/update/loss": float(step)})
    _wait(lambda: logger.health()["otlp"]["retries"] >= 2, "the sender was not refused")
    metrics = scrape(server.metrics_url)
    (failed,) = samples(metrics, "rltel_collector_sink_start_failed", run="exp_t1")
    labels = dict(failed)
    assert labels["sink"] == "tensorboard" and str(blocked) in labels["error"], labels
    refusals = samples(metrics, "rltel_collector_requests_refused_total", reason="sinks_down")
    assert sum(refusals.values()) >= 2
    assert not (files / "exp" / "t1" / "wandb").exists()  # W&B's run was not kept open
    blocked.unlink()  # the path is fixed: the sender's retries now arrive
    logger.commit(0, 3, 3, {"ppo_actor/update/loss": 3.0})
    otlp = logger.health
    _wait(lambda: otlp()["otlp"]["spool_points"] == 0 and otlp()["otlp"]["queue_depth"] == 0, "")
    logger.close(timeout_s=30)
    metrics = scrape(server.metrics_url)
    assert not samples(metrics, "rltel_collector_sink_start_failed", run="exp_t1")
    run_dir = str((files / "exp" / "t1").resolve())
    assert samples(metrics, "rltel_collector_run_info", run="exp_t1", dir=run_dir)
    server.stop(60)  # W&B's run finished: its file complete
    assert tensorboard_series(str(blocked), "ppo_actor/update/loss") == {1: 1.0, 2: 2.0, 3: 3.0}
    (path,) = glob.glob(str(files / "exp" / "t1" / "wandb" / "offline-run-*" / "*.wandb"))
    rows = [r["history"]["item"] for r in inspect_wandb(path) if r["type"] == "history"]
    losses = [row["ppo_actor/update/loss"] for row in rows if "ppo_actor/update/loss" in row]
    assert losses == [1, 2, 3]


def test_root_links_replace_a_stale_link_and_keep_a_real_directory(tmp_path, caplog):
    files, root = tmp_path / "files", tmp_path / "tb"
    stale = root / "exp" / "t1"
    stale.parent.mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", stale)  # an earlier run's, to a directory now gone
    kept = root / "exp" / "t2" / "events.out.tfevents.1.earlier"  # an older collector's files
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"")
    sinks = from_dict({"sinks": {"fileroot": str(files), "tensorboard": {"path": str(root)}}})
    factory = RunSinkFactory(sinks.sinks)
    for trial in ("t1", "t2"):
        for sink in factory("exp", trial):
            sink.shutdown()
    assert os.path.samefile(stale, files / "exp" / "t1" / "tensorboard")
    assert kept.exists() and not os.path.islink(kept.parent)
    assert list((files / "exp" / "t2" / "tensorboard").glob("events.out.tfevents.*"))
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"{kept.parent} does not lead to {files / 'exp' / 't2' / 'tensorboard'}" in warning
    assert factory.failures() == {}
