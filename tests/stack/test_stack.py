"""The docker-compose stack as a user runs it, on a real Docker engine (`make stack-test`).

One stack for the module, brought up from nothing with ``docker compose up -d --build
--wait`` and taken through a user's day in order: the image, health, scrape and rules, the
demo into it, a run of known values beside it, the critical KL alert at the webhook, a
``stop`` that every service obeys at once with every acknowledged step in every bridge,
then ``down`` and ``up`` keeping the data. The values are checked against what the test
committed (numpy), the bridges' files with their own readers.
"""

from __future__ import annotations

import glob
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from swanlab.log.backup.datastore import DataStore
from swanlab.log.backup.models import ModelsParser
from tensorboard.backend.event_processing import event_accumulator as ea

from rltel.logger import StatsLogger
from telemetry import stats_tracker
from telemetry.metrics import record_train_infer
from tests.stack.compose import ROOT, compose, containers, docker, volume_path, wait_for
from tests.trackio_log import series, trackio_run
from tests.wandb_log import inspect_wandb

pytestmark = pytest.mark.timeout(900)

OTLP = "127.0.0.1:4317"
PROMETHEUS = "http://127.0.0.1:9090"
IMAGE = "rltel-collector:0.2.0"
SERVICES = {"collector", "prometheus", "alertmanager", "alert-webhook"}
"""What runs without a registry: Grafana only with `--profile grafana` (no stand-in)."""
DEMO_STEPS = 6
KNOWN = ("stack-check", "known")
KNOWN_STEPS = 5
LOSS, GRAD_NORM = "ppo_actor/update/loss/avg", "ppo_actor/update/grad_norm"


def query(expr: str, at: float | None = None) -> list[dict]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    url = f"{PROMETHEUS}/api/v1/query?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)["data"]["result"]


def scalar(expr: str, at: float | None = None) -> float | None:
    result = query(expr, at)
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def run_dir(experiment: str, trial: str) -> Path:
    return volume_path("collector-data") / "runs" / experiment / trial


def known_values(step: int) -> dict[str, float]:
    """The known run's committed values at ``step``, computed in numpy."""
    loss, mask = known_inputs(step)
    return {LOSS: float(loss[mask].astype(np.float64).mean()), GRAD_NORM: 0.25 * step}


def known_inputs(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(step)
    return rng.normal(1.0 / step, 0.1, (4, 16)).astype(np.float32), rng.random((4, 16)) < 0.7


def commit_known_steps(steps: range) -> None:
    """A trainer of its own run (its own labels) sends ``steps`` to the stack's collector."""
    logger = StatsLogger(
        {"experiment_name": KNOWN[0], "trial_name": KNOWN[1], "otlp": {"endpoint": OTLP}}
    )
    for step in steps:
        loss, mask = known_inputs(step)
        with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
            stats_tracker.denominator(n_valid_tokens=torch.from_numpy(mask))
            stats_tracker.stat(loss=torch.from_numpy(loss), denominator="n_valid_tokens")
            stats_tracker.scalar(grad_norm=0.25 * step)
        logger.commit(epoch=0, epoch_step=step, global_step=step, data=stats_tracker.export_all())
    logger.close(60)
    otlp = logger.health()["otlp"]
    assert otlp["points_failed"] == 0 and otlp["points_dropped"] == 0, otlp


def tensorboard_steps(path: Path, key: str) -> list[tuple[int, float]]:
    events = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(key)]


def wandb_rows(path: Path) -> list[dict]:
    (log,) = glob.glob(str(path / "wandb" / "offline-run-*" / "*.wandb"))
    return [r["history"]["item"] for r in inspect_wandb(log) if r["type"] == "history"]


def swanlab_steps(path: Path, key: str) -> list[tuple[int, float]]:
    (backup,) = glob.glob(str(path / "swanlog" / "**" / "backup.swanlab"), recursive=True)
    store = DataStore()
    store.open_for_scan(backup)
    with ModelsParser() as parser:
        for record in store:
            parser.parse_record(record)
    scalars = parser.get_parsed()[6]
    return sorted((s.step, s.metric["data"]) for s in scalars if s.key == key)


@pytest.fixture(scope="module")
def stack():
    """The stack, up from nothing (volumes removed first, images built); down at the end."""
    compose("down", "--volumes", "--remove-orphans")
    started = time.monotonic()
    try:
        compose("up", "--detach", "--build", "--wait", "--wait-timeout", "300")
        print(f"\nstack up (image build included) in {time.monotonic() - started:.0f} s")
        yield
    finally:
        print(compose("logs", "--no-color", "--tail", "40", check=False)[-6000:])
        compose("down", "--volumes", check=False)


def test_the_image_is_the_installed_wheel_run_by_a_non_root_user(stack):
    script = (
        "id -u; pwd; rltel collector --help >/dev/null && echo help-ok; "
        "python -c 'import collector, rltel; print(collector.__file__)'; "
        "python -c 'import torch' 2>/dev/null || echo no-torch; "
        "ls /opt/rltel /src 2>/dev/null | wc -l"
    )
    out = docker("run", "--rm", "--entrypoint", "sh", IMAGE, "-c", script).split()
    uid, workdir, help_ok, package, no_torch, sources = out
    assert (uid, workdir, help_ok, no_torch) == ("10001", "/var/lib/rltel", "help-ok", "no-torch")
    assert package.startswith("/usr/local/lib/python3") and "site-packages" in package
    assert sources == "0"  # no source tree: the wheel is what runs
    size = int(docker("image", "inspect", "--format", "{{.Size}}", IMAGE))
    print(f"\n{IMAGE}: {size / 1e6:.0f} MB")


def test_every_service_is_healthy_and_the_image_built_once(stack):
    running = containers()
    assert set(running) == SERVICES
    for name, record in running.items():
        assert record["State"]["Health"]["Status"] == "healthy", name
    # alert-webhook runs the collector's image, not a second build of it
    assert running["alert-webhook"]["Image"] == running["collector"]["Image"]


def test_prometheus_scrapes_the_collector_and_loaded_every_rule(stack):
    shipped = yaml.safe_load((ROOT / "dashboards/prometheus/alerts.yml").read_text())
    names = {rule["alert"] for group in shipped["groups"] for rule in group["rules"]}
    with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/rules", timeout=10) as reply:
        groups = json.load(reply)["data"]["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    assert loaded == names and len(names) > 20
    wait_for(
        lambda: scalar('up{job="rltel-collector"}') == 1.0, 60, "the collector's scrape target up"
    )


def test_the_demo_and_a_second_run_land_with_their_own_labels(stack):
    demo = subprocess.run(
        [sys.executable, "-m", "rltel.cli", "demo", "--otlp-endpoint", OTLP,
         "--steps", str(DEMO_STEPS)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    commit_known_steps(range(1, KNOWN_STEPS + 1))
    demo_step = 'rltel_step{experiment="rltel-demo",trial="trial0",role="trainer"}'
    known = f'{{experiment="{KNOWN[0]}",trial="{KNOWN[1]}"}}'
    wait_for(lambda: scalar(demo_step) == DEMO_STEPS - 1, 60, "the demo's last step")
    wait_for(lambda: scalar(f"rltel_step{known}") == KNOWN_STEPS, 60, "the known run's last step")
    last = known_values(KNOWN_STEPS)
    assert scalar(f"ppo_actor_update_loss_avg{known}") == pytest.approx(last[LOSS], rel=1e-6)
    assert scalar(f"ppo_actor_update_grad_norm{known}") == last[GRAD_NORM]
    series = scalar('count({experiment="rltel-demo",trial="trial0"})')
    assert series is not None and series > 100  # every producer of the demo, not a few keys


def test_the_critical_kl_alert_reaches_the_webhook(stack):
    """docs/stack.md's example: KL k3 = e - 2 on every token, above the critical 0.1."""
    logger = StatsLogger({"experiment_name": "alert-check", "otlp": {"endpoint": OTLP}})
    trainer_logp = torch.full((2, 8), -1.0)
    with stats_tracker.scope("ppo_actor"):
        record_train_infer(trainer_logp, trainer_logp - 1.0, torch.ones(2, 8, dtype=torch.bool))
    logger.commit(epoch=0, epoch_step=0, global_step=0, data=stats_tracker.export_all())
    logger.close(30)
    sent = time.monotonic()

    def alert_lines() -> list[dict]:
        out = compose("logs", "--no-color", "--no-log-prefix", "alert-webhook")
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return [
            line for line in lines
            if line["alertname"] == "RLTrainInferKLCritical" and line["status"] == "firing"
        ]  # fmt: skip

    (line, *_) = wait_for(alert_lines, 120, "RLTrainInferKLCritical at the webhook")
    print(f"\nKL alert at the webhook {time.monotonic() - sent:.0f} s after the commit")
    assert line["receiver"] == "rltel-critical"
    assert "alert-check" in line["summary"]


def test_stop_ends_every_service_at_once_with_every_step_in_every_bridge(stack):
    """TensorBoard, SwanLab, Trackio and W&B (offline) in the collector's volume, each read
    back with its own reader: each step of the known run once, at its committed values."""
    started = time.monotonic()
    compose("stop")
    took = time.monotonic() - started
    stopped = containers()
    for name, record in stopped.items():
        assert record["State"]["Running"] is False, name
        assert record["State"]["ExitCode"] == 0, (name, record["State"])  # 137: killed
    assert took < 30, f"docker compose stop took {took:.0f} s"
    path = run_dir(*KNOWN)
    steps = range(1, KNOWN_STEPS + 1)
    for key in (LOSS, GRAD_NORM):
        want = [(step, pytest.approx(known_values(step)[key], rel=1e-6)) for step in steps]
        assert tensorboard_steps(path / "tensorboard", key) == want, key
        assert swanlab_steps(path, key) == want, key
    logged = series(trackio_run(path / "trackio", *KNOWN)["rows"])
    for key in (LOSS, GRAD_NORM):  # Trackio's project is the experiment, its run the trial
        want = {step: [pytest.approx(known_values(step)[key], rel=1e-6)] for step in steps}
        assert logged[key] == want, key
    rows = [row for row in wandb_rows(path) if LOSS in row]
    assert [int(row["_step"]) for row in rows] == list(steps)  # W&B's step is global_step
    assert [row[LOSS] for row in rows] == [
        pytest.approx(known_values(step)[LOSS], rel=1e-6) for step in steps
    ]
    demo_steps = [s for s, _ in tensorboard_steps(run_dir("rltel-demo", "trial0") / "tensorboard",
                                                  "rltel/step")]  # fmt: skip
    assert demo_steps == list(range(DEMO_STEPS))


def test_down_and_up_keep_the_journal_and_the_data(stack):
    known = f'{{experiment="{KNOWN[0]}",trial="{KNOWN[1]}"}}'
    samples = f"count_over_time(rltel_step{known}[1h])"
    compose("up", "--detach", "--wait", "--wait-timeout", "300")  # after the stop above
    kept = scalar(samples)
    assert kept is not None and kept > 0
    compose("down")
    compose("up", "--detach", "--wait", "--wait-timeout", "300")
    assert (scalar(samples) or 0) >= kept  # Prometheus's volume: the samples scraped before
    commit_known_steps(range(KNOWN_STEPS + 1, KNOWN_STEPS + 3))
    wait_for(
        lambda: scalar(f"rltel_step{known}") == KNOWN_STEPS + 2, 60, "a step after the restart"
    )
    compose("stop")
    steps = [s for s, _ in tensorboard_steps(run_dir(*KNOWN) / "tensorboard", GRAD_NORM)]
    assert steps == list(range(1, KNOWN_STEPS + 3))  # the collector's volume: each step once
