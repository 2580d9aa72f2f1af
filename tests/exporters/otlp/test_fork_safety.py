"""A trainer that forks (data-loader workers) while its OTLP sink is inside a gRPC call:
the OTLP sink turns gRPC's fork handlers off before gRPC loads, so no child is started
over a poller caught mid-update (exporters/otlp/fork_safety.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from exporters.otlp import fork_safety
from tests.telemetry.otlp_receiver import Receiver

ROOT = Path(__file__).resolve().parents[3]
JOB = Path(__file__).with_name("fork_child_job.py")
SKIPPED = "skipping fork() handlers"  # gRPC's line when it forks mid-call with handlers on


def run_job(
    tmp_path: Path, env_value: str | None, forks: int, hung_after_s: float
) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != fork_safety.ENV}
    if env_value is not None:
        env[fork_safety.ENV] = env_value
    env["PYTHONPATH"] = str(ROOT)
    with Receiver() as receiver:
        receiver.stall_s = 0.2  # the sender is inside a gRPC call almost all the time
        job = subprocess.Popen(
            [
                sys.executable,
                str(JOB),
                receiver.endpoint,
                str(tmp_path),
                str(forks),
                str(hung_after_s),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:  # a hung job (or this test's own timeout) must not leave the job behind
            stdout, stderr = job.communicate(timeout=100)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.communicate()
        done = subprocess.CompletedProcess(job.args, job.returncode, stdout, stderr)
        assert done.returncode == 0, done.stderr[-3000:]
        assert receiver.requests, "the trainer exported nothing"
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_sink_turns_grpc_fork_handlers_off_and_every_child_exits_cleanly(tmp_path):
    result, stderr = run_job(tmp_path, None, forks=20, hung_after_s=10.0)
    assert result["env"] == "false"
    assert result["codes"] == [0] * 20
    assert SKIPPED not in stderr


def test_with_the_handlers_on_forks_do_land_mid_call(tmp_path):
    """The user's explicit choice wins; and the job above does fork while gRPC is busy (with
    the handlers on, gRPC says it skipped them, and such children hang or abort on this
    machine: gRPC restarts its threads over a poller caught mid-call), so its clean result
    is not luck."""
    result, stderr = run_job(tmp_path, "1", forks=3, hung_after_s=3.0)
    assert result["env"] == "1"
    assert SKIPPED in stderr


@pytest.mark.parametrize(("value", "off"), [("0", True), ("False", True), ("1", False)])
def test_a_value_the_user_set_is_kept(monkeypatch, value, off):
    monkeypatch.setenv(fork_safety.ENV, value)
    assert fork_safety.keep_forked_children_safe() is off
    assert os.environ[fork_safety.ENV] == value


def test_grpc_loaded_first_leaves_the_handlers_and_warns_once(monkeypatch, caplog):
    monkeypatch.delenv(fork_safety.ENV, raising=False)
    monkeypatch.setattr(fork_safety, "_warned", False)
    assert "grpc" in sys.modules  # loaded by this test module's receiver
    with caplog.at_level("WARNING", logger=fork_safety.__name__):
        assert fork_safety.keep_forked_children_safe() is False
        assert fork_safety.keep_forked_children_safe() is False
    assert fork_safety.ENV not in os.environ
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and f"{fork_safety.ENV}=false" in warnings[0]
