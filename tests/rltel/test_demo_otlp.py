"""`rltel demo --collector` and `--otlp-endpoint`: ranks and rollout worker processes over OTLP.

Each run is the real command in a subprocess (its exit status and output are the contract);
the outputs are read back with TensorBoard's EventAccumulator and `wandb leet inspect`, and
the merged rollout reward is checked against what each worker process wrote it sampled.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from collector.config import from_dict
from collector.server import CollectorServer
from rltel.demo.cli import parse
from rltel.demo.health import HealthUnavailable, settled_health
from rltel.demo.hints import collector_hints, print_hints
from rltel.demo.rollout import wait_delivered
from rltel.logger import StatsLogger
from rltel.report.runs import load_run
from rltel.report.timeline import read_timeline
from tests.distributed import free_port
from tests.proc_sockets import listening
from tests.rltel.test_demo import assert_families, assert_trackio, listed_files, read_tensorboard
from tests.telemetry.otlp_receiver import Receiver

RLTEL = Path(sys.executable).with_name("rltel")
STEPS = 4
RUN = ("rltel-demo", "trial0")
DEMO_RUN = "rltel-demo_trial0"  # the collector's run label


def rltel(
    *args: str, timeout: float = 240, env: dict | None = None, listeners: set | None = None
) -> subprocess.CompletedProcess:
    """Run ``rltel *args`` in its own session; a hang kills the whole group and fails.

    With ``listeners``, every TCP socket the command or a process it started listens on while it
    runs is added to it (polled every 50 ms), the collector's included.
    """
    env = {**os.environ, "WANDB_SILENT": "true", **(env or {})}
    with subprocess.Popen(
        [str(RLTEL), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(proc.pid, listeners, done))
        if listeners is not None:
            watcher.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"rltel {' '.join(args)} hung\nstdout:\n{out}\nstderr:\n{err}")
        finally:
            done.set()
            if listeners is not None:
                watcher.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tree_listeners(root: int) -> set[tuple[str, int]]:
    """Every TCP socket process ``root`` or a descendant of it listens on now."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # "pid (comm) state ppid ..."
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the process ended meanwhile
    tree, found = {root}, set()
    while grown := {pid for pid, ppid in parents.items() if ppid in tree} - tree:
        tree |= grown
    for pid in tree:
        try:
            found.update(listening(pid))
        except OSError:
            continue
    return found


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 or ::1, an IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) included."""
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def _watch(root: int, listeners: set, done: threading.Event) -> None:
    while not done.wait(0.05):
        listeners.update(tree_listeners(root))


def worker_records(run_dir: Path) -> dict[int, list[dict]]:
    """What each rollout worker process wrote it sampled, by step."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for path in sorted((run_dir / "rollout-workers").glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_step[record["step"]].append(record)
    return by_step


def assert_count_weighted(run_dir: Path, events, workers: int) -> None:
    by_step = worker_records(run_dir)
    assert sorted(by_step) == list(range(STEPS))
    merged = {e.step: e.value for e in events.Scalars("rollout/reward")}
    assert sorted(merged) == list(range(STEPS))
    differs = []
    for step, records in by_step.items():
        assert sorted(r["worker"] for r in records) == list(range(workers))
        weighted = sum(r["sum"] for r in records) / sum(r["count"] for r in records)
        assert merged[step] == pytest.approx(weighted, rel=1e-6), step
        plain = sum(r["sum"] / r["count"] for r in records) / len(records)
        differs.append(abs(plain - weighted) > 1e-4)
    if workers > 1:  # the workers' counts differ: a plain mean of means would fail the test
        assert any(differs)


def assert_wandb_complete(run_dir: Path) -> None:
    (path,) = run_dir.glob("wandb/offline-run-*/*.wandb")
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    records = [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]
    rows = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert any("rollout/reward" in row for row in rows)
    assert any(r["type"] == "exit" for r in records)  # the run was finished: file complete


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_collector_mode_picks_a_free_prometheus_port_unless_given():
    assert parse(["--collector"]).prometheus_port == 0  # the stack's collector may hold 9464
    port = free_port()
    assert parse(["--collector", "--prometheus-port", str(port)]).prometheus_port == port


def assert_reported(run_dir: Path) -> None:
    """`rltel report RUN_DIR` finds the run's TensorBoard files and its W&B MoE tables."""
    run = load_run(run_dir)
    assert all(path.parent == run_dir / "tensorboard" for path in run.event_files)
    assert "rollout/reward" in run.scalars
    assert run.expert_source == "W&B tables moe_balance/expert_loads"
    assert sorted(run.experts) == list(range(STEPS))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_with_collector_merges_rollout_workers_and_drains(tmp_path: Path):
    args = ["--steps", str(STEPS), "--fileroot", str(tmp_path)]  # any free Prometheus port
    listeners: set[tuple[str, int]] = set()
    result = rltel("demo", "--collector", *args, listeners=listeners)
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, report
    # ranks, rollout workers and the collector listen on loopback only (issue 23, item 6)
    ports = {port for _, port in listeners}
    assert {int(result.stdout.split("metrics http://127.0.0.1:", 1)[1].split("/")[0])} <= ports
    assert listeners and all(is_loopback(address) for address, _ in listeners), listeners
    assert "Traceback" not in result.stderr, report
    out = result.stdout
    assert "collector: drained and exited with status 0" in out, report
    assert "rollout workers: exit statuses [0, 0]" in out, report
    pid = int(out.split("collector: pid ", 1)[1].split(",", 1)[0])
    assert_gone(pid)
    metrics = out.split("metrics ", 1)[1].split(",", 1)[0]
    assert metrics.startswith("http://127.0.0.1:") and ":9464/" not in metrics, metrics
    assert "rollout_reward{" in out  # each worker's series, scraped from the collector
    assert [x.split()[1] for x in out.splitlines() if x.startswith("step ")] == [
        f"{s}/{STEPS}" for s in range(1, STEPS + 1)
    ]
    run_dir = tmp_path.joinpath(*RUN)
    assert f"rltel report {run_dir}" in out and f"wandb leet {run_dir / 'wandb'}" in out

    assert "collector reported problems" not in result.stderr, report

    events = read_tensorboard(run_dir / "tensorboard")  # the embedded demo's layout
    assert_families(events, list(range(STEPS)))
    assert "timeperf/generate" in events.Tags()["scalars"]  # the workers' own timing
    assert_count_weighted(run_dir, events, workers=2)
    assert_wandb_complete(run_dir)
    assert list((run_dir / "swanlog").iterdir())
    assert_trackio(run_dir, out, listed_files(out, run_dir), list(range(STEPS)))
    assert_reported(run_dir)
    log = (run_dir / "collector.log").read_text()
    assert "rltel collector: stopped" in log
    timeline = read_timeline(run_dir)  # the collector's trace.json: every rank and worker
    workers = ("rollout worker 0", "rollout worker 1")
    assert timeline.rows == ("trainer rank 0", "trainer rank 1", *workers)
    assert set(timeline.slowest) == set(timeline.steps) and len(timeline.steps) == 3
    assert {"train_step", "rollout_step", "timeperf/generate"} <= {b.name for b in timeline.bars}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sink_the_collector_cannot_start_is_printed_and_fails_the_demo(tmp_path: Path):
    shadow = tmp_path / "shadow" / "swanlab"  # swanlab not installed, as the collector sees it
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'swanlab'\", name='swanlab')\n"
    )
    run_dir = tmp_path.joinpath("runs", *RUN)
    earlier = run_dir / "swanlog" / "run-earlier" / "backup.swanlab"  # an earlier run's
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"")
    args = ["--steps", "2", "--rollout-workers", "1", "--fileroot", str(tmp_path / "runs")]
    result = rltel("demo", "--collector", *args, env={"PYTHONPATH": str(shadow.parent)})
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 1, report
    assert "Traceback" not in result.stderr, report
    problems = result.stderr.split("rltel demo: the collector reported problems (", 1)[1]
    (line,) = problems.splitlines()[1:]
    assert line.startswith("  sink swanlab of run rltel-demo_trial0 failed to start: "), line
    assert "pip install rltel[swanlab]" in line, line
    out = result.stdout
    listed = out.split(f"run files this run wrote under {run_dir}:\n", 1)[1].split("\n\n")[0]
    assert "swanlog" not in listed and "tensorboard" in listed and "wandb" in listed, report
    assert f"rltel report {run_dir}" in out, report  # the other sinks wrote the run
    events = read_tensorboard(run_dir / "tensorboard")
    assert [e.step for e in events.Scalars("rollout/reward")] == [0, 1]
    assert_wandb_complete(run_dir)


def start_collector(tmp_path: Path) -> tuple[subprocess.Popen, str, str]:
    """A real `rltel collector` the test owns, on free ports; (process, OTLP endpoint,
    metrics URL)."""
    config = {
        "receiver": {"port": 0},
        "sinks": {
            "fileroot": str(tmp_path / "collector"),
            "tensorboard": {"path": str(tmp_path / "collector-tb")},
            "prometheus": {"port": 0},
        },
    }
    path = tmp_path / "collector.yaml"
    path.write_text(yaml.safe_dump({"collector": config}))
    proc = subprocess.Popen(
        [str(RLTEL), "collector", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("rltel collector: otlp="):
            fields = dict(field.split("=", 1) for field in line.split()[2:])
            return proc, fields["otlp"], fields["metrics"]
    proc.kill()
    raise AssertionError(f"collector did not start (exit {proc.wait()})")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_sends_to_a_running_collector(tmp_path: Path):
    collector, endpoint, metrics = start_collector(tmp_path)
    try:
        fileroot = tmp_path / "demo"
        args = ["--steps", str(STEPS), "--rollout-workers", "1", "--fileroot", str(fileroot)]
        port = metrics.rsplit(":", 1)[1].split("/", 1)[0]  # where the demo reads its health
        result = rltel("demo", "--otlp-endpoint", endpoint, "--prometheus-port", port, *args)
    finally:
        collector.send_signal(signal.SIGTERM)
        code = collector.wait(120)
        collector.stdout.close()
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, report
    assert code == 0
    assert "collector: pid" not in result.stdout  # none started
    assert "rollout workers: exit statuses [0]" in result.stdout, report
    local = fileroot.joinpath(*RUN)
    assert not {"tb", "tensorboard", "wandb", "swanlog"} & {p.name for p in local.iterdir()}
    run_dir = tmp_path.joinpath("collector", *RUN).resolve()  # the collector's run directory
    assert f"rltel report {run_dir}\n" in result.stdout, report
    assert f"tensorboard --logdir {run_dir / 'tensorboard'}\n" in result.stdout, report
    assert "wandb leet" not in result.stdout, report  # the collector runs no W&B sink
    assert os.path.samefile(tmp_path.joinpath("collector-tb", *RUN), run_dir / "tensorboard")
    events = read_tensorboard(run_dir / "tensorboard")
    assert_families(events, list(range(STEPS)))
    assert_count_weighted(local, events, workers=1)


def test_the_demo_waits_until_every_commit_it_queued_was_delivered(tmp_path: Path):
    """Two commits queued, the receiver slow: the wait returns with both received. (A count of
    exported requests, as the demo once waited, returned when the first was acknowledged; a
    rollout window arriving after its training step is merged into the next one.)"""
    with Receiver() as receiver:
        receiver.stall_s = 0.2
        config = {"experiment_name": RUN[0], "trial_name": RUN[1], "fileroot": str(tmp_path)}
        config["otlp"] = {"endpoint": receiver.endpoint}
        logger = StatsLogger(config, role="rollout", worker_id=0)
        try:
            for step in (1, 2):
                logger.commit(0, step, step, {"rollout/reward": float(step)})
            wait_delivered(logger)
            assert len(receiver.requests) == 2
        finally:
            logger.close()


def test_hints_name_only_what_a_running_collector_wrote(tmp_path: Path):
    """No TensorBoard sink there: no report; its health unreadable: no command at all."""
    sinks = {"fileroot": str(tmp_path / "files"), "prometheus": {"port": 0}}  # no file sink
    server = CollectorServer(from_dict({"receiver": {"port": 0}, "sinks": sinks}))
    server.start()
    try:
        logger = StatsLogger(
            {
                "experiment_name": RUN[0],
                "trial_name": RUN[1],
                "fileroot": str(tmp_path / "client"),
                "otlp": {"endpoint": server.endpoint},
            }
        )
        logger.commit(0, 0, 0, {"ppo_actor/update/loss": 1.0})
        logger.close(timeout_s=30)
        health = settled_health(server.metrics_url)
    finally:
        server.stop(30)
    assert health.run_dirs == {DEMO_RUN: str(tmp_path.joinpath("files", *RUN).resolve())}
    assert health.problems(DEMO_RUN, whole_collector=True) == []
    shown = io.StringIO()
    print_hints(collector_hints(health, server.endpoint, DEMO_RUN), shown)
    text = shown.getvalue()
    assert "  rltel report " not in text and "tensorboard --logdir" not in text, text
    assert "no TensorBoard files were written" in text, text
    nobody = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(HealthUnavailable, match="did not answer"):
        settled_health(nobody)
    shown = io.StringIO()
    print_hints(collector_hints("it did not answer", server.endpoint, DEMO_RUN), shown)
    assert "  rltel report " not in shown.getvalue() and "--prometheus-port" in shown.getvalue()


BAD_ENDPOINTS = {
    "no port": "localhost",
    "scheme": "http://127.0.0.1:4317",
    "port 0": "127.0.0.1:0",
    "port too large": "127.0.0.1:70000",
    "port not a number": "127.0.0.1:grpc",
    "no host": ":4317",
    "ipv6 without brackets": "::1:4317",
}


@pytest.mark.parametrize("case", list(BAD_ENDPOINTS))
def test_bad_otlp_endpoint_is_one_line_exit_2(case: str, tmp_path: Path):
    value = BAD_ENDPOINTS[case]
    result = rltel("demo", "--otlp-endpoint", value, "--fileroot", str(tmp_path / "runs"))
    assert_one_line_error(result, "--otlp-endpoint", repr(value))
    assert not (tmp_path / "runs").exists()


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("rltel demo: error: argument "), line
    assert all(needle in line for needle in needles), line


def test_unreachable_endpoint_conflicts_and_embedded_workers_are_one_line_exit_2(tmp_path):
    fileroot = str(tmp_path / "runs")
    nobody = f"127.0.0.1:{free_port()}"
    result = rltel("demo", "--otlp-endpoint", nobody, "--fileroot", fileroot)
    assert_one_line_error(result, "--otlp-endpoint", nobody, "no collector accepts")
    result = rltel("demo", "--collector", "--otlp-endpoint", nobody, "--fileroot", fileroot)
    assert_one_line_error(result, "not allowed with")
    result = rltel("demo", "--rollout-workers", "2", "--fileroot", fileroot)
    assert_one_line_error(result, "--rollout-workers", "--collector")
    result = rltel("demo", "--collector", "--rollout-workers", "-1", "--fileroot", fileroot)
    assert_one_line_error(result, "--rollout-workers", "'-1'")
    assert not (tmp_path / "runs").exists()
