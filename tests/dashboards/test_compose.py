"""The docker-compose stack's files, checked here without a Docker engine.

The stack itself is built and run on a real engine by ``make stack-test`` (tests/stack).
Here, each config the stack mounts is checked by its own tool: the collector config by the
collector's loader, prometheus.yml by ``promtool check config``, alertmanager.yml by
``amtool check-config``, the Alertmanager routing tree by ``amtool config routes test``.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from collector.config import load as load_collector_config
from collector.requirements import collector_requirements
from dashboards.build import BOARDS
from rltel.logger import StatsLogger
from tests.distributed import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"collector", "prometheus", "alertmanager", "alert-webhook", "grafana"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _binds(service: dict) -> dict[str, str]:
    """Host path (relative to the repo) -> container path, for bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[source[2:]] = target
    return out


def _published(service: dict) -> dict[int, tuple[str, int]]:
    """Container port -> (host address, host port)."""
    out = {}
    for port in service.get("ports", []):
        address, host_port, container_port = str(port).split(":")
        out[int(container_port)] = (address, int(host_port))
    return out


def _mounted(compose: dict, service: str, repo_path: str) -> str:
    return _binds(compose["services"][service])[repo_path]


def test_services(compose):
    assert set(compose["services"]) == SERVICES


def test_images_are_pinned(compose):
    for name, service in compose["services"].items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {image} is not pinned"
    assert compose["services"]["collector"]["build"]["dockerfile"] == "Dockerfile"


def test_ports_bind_loopback_only(compose):
    for name, service in compose["services"].items():
        published = _published(service)
        assert published, f"{name} publishes no port"
        for container_port, (address, host_port) in published.items():
            assert address == "127.0.0.1", f"{name}: port {container_port} on {address}"
            assert host_port == container_port


def test_bind_mounts_exist_and_named_volumes_declared(compose):
    declared = set(compose["volumes"])
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} missing"
                assert volume.endswith(":ro"), f"{name}: {volume} is writable"
            else:
                assert source in declared, f"{name}: volume {source} not declared"


def test_every_service_has_a_healthcheck_and_waits_on_healthy(compose):
    for name, service in compose["services"].items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD" and len(test) > 2, name
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in SERVICES
            assert condition == {"condition": "service_healthy"}


def test_collector_config_loads_and_matches_ports(compose):
    path = "dashboards/compose/collector.yaml"
    service = compose["services"]["collector"]
    target = _mounted(compose, "collector", path)
    assert service["command"] == ["collector", "--config", target]
    config = load_collector_config(ROOT / path)  # the collector's own validation
    published = _published(service)
    assert config.receiver.port in published
    assert config.sinks.prometheus.enabled
    assert config.sinks.prometheus.port in published
    # Other containers reach the collector only when it binds beyond loopback inside.
    assert config.receiver.host == config.sinks.prometheus.host == "0.0.0.0"
    health = " ".join(service["healthcheck"]["test"])
    assert f"127.0.0.1:{config.sinks.prometheus.port}/healthz" in health


NO_TORCH = """
import runpy, sys

class NoTorch:  # the collector image has no torch: any import of it fails
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (no torch in the image)")

sys.meta_path.insert(0, NoTorch())
sys.argv = ["rltel", *sys.argv[1:]]
runpy.run_module("rltel.cli", run_name="__main__")
"""


def test_collector_command_serves_the_healthcheck(compose, tmp_path):
    """The compose command and config run a real collector without torch (ports on loopback).

    It serves the healthcheck, takes a trainer's steps over OTLP into Prometheus and
    TensorBoard, and exits 0 on SIGTERM.
    """
    service = compose["services"]["collector"]
    config = yaml.safe_load((ROOT / "dashboards/compose/collector.yaml").read_text())
    metrics_port, otlp_port = free_port(), free_port()
    config["collector"]["receiver"].update(host="127.0.0.1", port=otlp_port)
    config["collector"]["sinks"]["prometheus"].update(host="127.0.0.1", port=metrics_port)
    config["collector"]["sinks"]["fileroot"] = str(tmp_path / "runs")
    config["collector"]["sinks"]["tensorboard"]["path"] = str(tmp_path / "tb")
    path = tmp_path / "collector.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [
        str(path) if arg == "/etc/rltel/collector.yaml" else arg for arg in service["command"]
    ]
    health = service["healthcheck"]["test"][1:]
    assert health[0] == "python"
    health = [sys.executable, *(a.replace(":9464/", f":{metrics_port}/") for a in health[1:])]
    log = (tmp_path / "collector.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", NO_TORCH, *command], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "collector.log").read_text()
            if subprocess.run(health, capture_output=True, timeout=10).returncode == 0:
                break
            assert time.monotonic() < deadline, (tmp_path / "collector.log").read_text()
            time.sleep(0.2)
        trainer = StatsLogger(
            {
                "experiment_name": "exp",
                "trial_name": "t",
                "fileroot": str(tmp_path / "client"),
                "otlp": {"endpoint": f"127.0.0.1:{otlp_port}"},
            }
        )
        for step in (1, 2):
            trainer.commit(0, step, step, {"ppo_actor/update/grad_norm": 0.5 * step})
        # Under load a 10 s close left the last steps in the trainer's spool (never sent)
        trainer.close(60)
        sent = trainer.health()["otlp"]
        assert sent["points_failed"] == 0 and sent["spool_points"] == 0, sent
        wanted = (b"ppo_actor_update_grad_norm{", b"rltel_closed{")
        # accepted, then applied from the sink's queue: 10 s was crossed at load 12-15
        deadline = time.monotonic() + 60
        while True:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            metrics = urllib.request.urlopen(url, timeout=5).read()
            if all(name in metrics for name in wanted) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        log_tail = (tmp_path / "collector.log").read_text()[-2000:]
        assert all(name in metrics for name in wanted), (metrics.decode()[-1000:], log_tail)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
    assert "torch" not in (tmp_path / "collector.log").read_text()
    assert list((tmp_path / "tb" / "exp" / "t").glob("events.out.tfevents.*"))
    # and the healthcheck fails once the collector is gone
    assert subprocess.run(health, capture_output=True, timeout=10).returncode != 0


def test_image_requirements_are_the_installed_metadata_without_torch_plus_the_bridges():
    """What the image installs beside rltel's wheel, read from the installed distribution."""
    requirements = collector_requirements()
    declared = metadata.requires("rltel")
    core = [r for r in declared if ";" not in r]
    bridges = [
        r.split(";")[0].strip()
        for r in declared
        if re.search(r'extra == "(wandb|swanlab|tensorboard|trackio)"', r)
    ]
    names = [re.split(r"[<>=!~\[]", r)[0] for r in requirements]
    assert requirements == [r for r in core if not r.startswith(("torch", "tqdm"))] + bridges
    assert {"wandb", "swanlab", "tensorboard", "trackio", "grpcio"} <= set(names)
    assert "torch" not in names and "tqdm" not in names
    assert len(names) == len(set(names))


def test_prometheus_config(compose, tmp_path):
    service = compose["services"]["prometheus"]
    config = yaml.safe_load((ROOT / "dashboards/prometheus/prometheus.yml").read_text())
    alerts_target = _mounted(compose, "prometheus", "dashboards/prometheus/alerts.yml")
    assert config["rule_files"] == [alerts_target]
    assert (
        f"--config.file={_mounted(compose, 'prometheus', 'dashboards/prometheus/prometheus.yml')}"
        in (service["command"])
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    collector = load_collector_config(ROOT / "dashboards/compose/collector.yaml")
    assert jobs["rltel-collector"]["static_configs"][0]["targets"] == [
        f"collector:{collector.sinks.prometheus.port}"
    ]
    assert jobs["rltel-collector"]["honor_labels"] is True
    am_targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am_targets == [
        f"alertmanager:{next(iter(_published(compose['services']['alertmanager'])))}"
    ]
    # promtool resolves rule_files on this machine: point them at the repo's file.
    local = dict(config, rule_files=[str(ROOT / "dashboards/prometheus/alerts.yml")])
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(local))
    result = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("amtool") or "amtool", *args], capture_output=True, text=True, timeout=30
    )


def test_alertmanager_config_and_routes(compose):
    path = ROOT / "dashboards/alertmanager/alertmanager.yml"
    assert _mounted(compose, "alertmanager", "dashboards/alertmanager/alertmanager.yml") in (
        " ".join(compose["services"]["alertmanager"]["command"])
    )
    checked = _amtool("check-config", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for labels, receiver in [
        (["severity=critical", "alertname=RLTrainInferKLCritical"], "rltel-critical"),
        (["severity=warning", "alertname=RLTrainInferKLHigh"], "rltel-default"),
    ]:
        routed = _amtool("config", "routes", "test", f"--config.file={path}", *labels)
        assert routed.returncode == 0, routed.stderr
        assert routed.stdout.strip() == receiver


def test_alertmanager_receivers_post_to_the_example_webhook(compose):
    config = yaml.safe_load((ROOT / "dashboards/alertmanager/alertmanager.yml").read_text())
    webhook = compose["services"]["alert-webhook"]
    assert compose["services"]["alertmanager"]["depends_on"] == {
        "alert-webhook": {"condition": "service_healthy"}
    }
    for receiver in config["receivers"]:
        (hook,) = receiver["webhook_configs"]
        url = urlparse(hook["url"])
        assert (url.hostname, url.path) == ("alert-webhook", "/alerts"), receiver["name"]
        assert url.port in _published(webhook)
        assert hook["send_resolved"] is True
    command = [*webhook["entrypoint"], *webhook["command"]]
    assert command[command.index("--host") + 1] == "0.0.0.0"  # reachable from alertmanager
    # one image, built once by the collector service, never pulled from a registry
    assert webhook["image"] == compose["services"]["collector"]["image"]
    assert "build" not in webhook
    assert webhook["pull_policy"] == compose["services"]["collector"]["pull_policy"] == "never"


def test_webhook_command_serves_and_logs_alerts(compose):
    """The compose command runs the example receiver (port moved to a free loopback one)."""
    webhook = compose["services"]["alert-webhook"]
    port = free_port()
    command = [*webhook["entrypoint"], *webhook["command"]]
    assert command[:3] == ["python", "-m", "dashboards.webhook"]
    command = [sys.executable, *command[1:]]
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    health = webhook["healthcheck"]["test"][1:]
    assert health[0] == "python"
    health = [sys.executable, *(a.replace(":9095/", f":{port}/") for a in health[1:])]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(health, capture_output=True, timeout=10).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        payload = {
            "version": "4",
            "receiver": "rltel-critical",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "RLTrainInferKLCritical", "severity": "critical"},
                    "annotations": {"summary": "Train/infer KL k3 at or above 0.1 (exp/t)"},
                    "startsAt": "2026-01-01T00:00:00Z",
                }
            ],
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/alerts",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert urllib.request.urlopen(request, timeout=5).status == 200
        line = json.loads(proc.stdout.readline())
        assert line["alertname"] == "RLTrainInferKLCritical"
        assert line["receiver"] == "rltel-critical" and line["status"] == "firing"
        assert line["summary"] == "Train/infer KL k3 at or above 0.1 (exp/t)"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_grafana_provisioning(compose):
    grafana = compose["services"]["grafana"]
    provisioning = ROOT / "dashboards/grafana/provisioning"
    assert _mounted(compose, "grafana", "dashboards/grafana/provisioning") == (
        "/etc/grafana/provisioning"
    )
    sources = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())
    by_type = {source["type"]: source for source in sources["datasources"]}
    # the dashboards' ${DS_PROMETHEUS} variable picks the default Prometheus data source
    assert by_type["prometheus"]["isDefault"] is True
    for kind in ("prometheus", "alertmanager"):
        url = urlparse(by_type[kind]["url"])
        assert url.hostname == kind
        assert url.port in _published(compose["services"][kind])
    provider = yaml.safe_load((provisioning / "dashboards/rltel.yml").read_text())["providers"][0]
    dashboards_dir = _mounted(compose, "grafana", "dashboards/grafana")
    assert provider["options"]["path"] == dashboards_dir
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dashboards_dir + "/")
    assert (ROOT / "dashboards/grafana" / home[len(dashboards_dir) + 1 :]).is_file()
    # the provider loads every board the build writes, and nothing else lies there
    boards = {path.stem for path in (ROOT / "dashboards/grafana").glob("*.json")}
    assert boards == set(BOARDS) and "engines" in boards


@pytest.mark.parametrize(
    ("environment", "wandb", "swanlab"),
    [
        ({}, "offline", "offline"),
        ({"RLTEL_WANDB_MODE": "online", "RLTEL_SWANLAB_MODE": "cloud"}, "online", "cloud"),
    ],
)
def test_the_bridges_are_offline_unless_dot_env_turns_them_online(
    compose, monkeypatch, environment, wandb, swanlab
):
    """docker-compose.yml hands .env's modes to the collector, whose loader reads them."""
    service = compose["services"]["collector"]
    for name in ("RLTEL_WANDB_MODE", "RLTEL_SWANLAB_MODE"):
        default = re.fullmatch(r"\$\{" + name + r":-(\w+)\}", service["environment"][name])
        monkeypatch.setenv(name, environment.get(name, default.group(1)))
    assert {"WANDB_API_KEY", "SWANLAB_API_KEY"} <= set(service["environment"])
    config = load_collector_config(ROOT / "dashboards/compose/collector.yaml")
    assert (config.sinks.wandb.mode, config.sinks.swanlab.mode) == (wandb, swanlab)
    assert config.sinks.tensorboard.path is not None
