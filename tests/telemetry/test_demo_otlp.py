"""`rltel demo --collector` and `--otlp-endpoint`: ranks and rollout worker processes over OTLP.

Each run is the real command in a subprocess (its exit status and output are the contract);
the outputs are read back with TensorBoard's EventAccumulator and `wandb leet inspect`, and
the merged rollout reward is checked against what each worker process wrote it sampled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from tests.telemetry.test_demo import assert_families, read_tensorboard

RLTEL = Path(sys.executable).with_name("rltel")
STEPS = 4
RUN = ("rltel-demo", "trial0")


def rltel(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``rltel *args`` in its own session; a hang kills the whole group and fails."""
    env = {**os.environ, "WANDB_SILENT": "true"}
    with subprocess.Popen(
        [str(RLTEL), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"rltel {' '.join(args)} hung\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_with_collector_merges_rollout_workers_and_drains(tmp_path: Path):
    args = ["--steps", str(STEPS), "--prometheus-port", "0", "--fileroot", str(tmp_path)]
    result = rltel("demo", "--collector", *args)
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, report
    assert "Traceback" not in result.stderr, report
    out = result.stdout
    assert "collector: drained and exited with status 0" in out, report
    assert "rollout workers: exit statuses [0, 0]" in out, report
    pid = int(out.split("collector: pid ", 1)[1].split(",", 1)[0])
    assert_gone(pid)
    assert "rollout_reward{" in out  # each worker's series, scraped from the collector
    assert [x.split()[1] for x in out.splitlines() if x.startswith("step ")] == [
        f"{s}/{STEPS}" for s in range(1, STEPS + 1)
    ]
    run_dir = tmp_path.joinpath(*RUN)
    assert f"rltel report {run_dir}" in out and f"wandb leet {run_dir / 'wandb'}" in out

    events = read_tensorboard(run_dir)  # the collector's TensorBoard sink
    assert_families(events, list(range(STEPS)))
    assert "timeperf/generate" in events.Tags()["scalars"]  # the workers' own timing
    assert_count_weighted(run_dir, events, workers=2)
    assert_wandb_complete(run_dir)
    assert list((run_dir / "swanlog").iterdir())
    log = (run_dir / "collector.log").read_text()
    assert "rltel collector: stopped" in log


def start_collector(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A real `rltel collector` the test owns, on free ports; (process, OTLP endpoint)."""
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
            return proc, line.split()[2].split("=", 1)[1]
    proc.kill()
    raise AssertionError(f"collector did not start (exit {proc.wait()})")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_sends_to_a_running_collector(tmp_path: Path):
    collector, endpoint = start_collector(tmp_path)
    try:
        fileroot = tmp_path / "demo"
        args = ["--steps", str(STEPS), "--rollout-workers", "1", "--fileroot", str(fileroot)]
        result = rltel("demo", "--otlp-endpoint", endpoint, *args)
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
    assert not {"tb", "wandb", "swanlog"} & {p.name for p in local.iterdir()}  # no local sinks
    events = read_tensorboard(tmp_path.joinpath("collector-tb", *RUN))
    assert_families(events, list(range(STEPS)))
    assert_count_weighted(local, events, workers=1)


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
    from tests.distributed import free_port

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
