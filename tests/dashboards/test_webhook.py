"""The example Alertmanager webhook receiver: what it accepts, keeps and logs."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dashboards.webhook import WebhookReceiver
from tests.distributed import free_port

ROOT = Path(__file__).resolve().parents[2]

ALERT = {
    "status": "firing",
    "labels": {"alertname": "RLTrainingStalled", "severity": "critical", "trial": "t"},
    "annotations": {"summary": "no new step"},
    "startsAt": "2026-01-01T00:00:00Z",
}


@pytest.fixture
def receiver():
    out = io.StringIO()
    times = iter(range(100))
    receiver = WebhookReceiver(out=out, clock=lambda: float(next(times)))
    receiver.out = out
    try:
        yield receiver
    finally:
        receiver.shutdown()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(request, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_keeps_each_notification_and_logs_one_line_per_alert(receiver):
    resolved = dict(ALERT, status="resolved")
    payload = {"receiver": "rltel-critical", "alerts": [ALERT, resolved]}
    assert _post(receiver.url, json.dumps(payload).encode()) == 200
    (notification,) = receiver.notifications()
    assert notification.received == 0.0
    assert notification.alerts() == [ALERT, resolved]
    lines = [json.loads(line) for line in receiver.out.getvalue().splitlines()]
    assert [(x["status"], x["alertname"], x["receiver"]) for x in lines] == [
        ("firing", "RLTrainingStalled", "rltel-critical"),
        ("resolved", "RLTrainingStalled", "rltel-critical"),
    ]
    assert lines[0]["labels"]["trial"] == "t" and lines[0]["summary"] == "no new step"


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
def test_rejects_what_is_not_a_json_object(receiver, body):
    assert _post(receiver.url, body) == 400
    assert receiver.notifications() == []


def test_health_and_unknown_paths(receiver):
    base = receiver.url.removesuffix("/alerts")
    assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(base + "/other", timeout=5)
    assert raised.value.code == 404


def test_shutdown_twice_is_safe():
    receiver = WebhookReceiver(out=None)
    receiver.shutdown()
    receiver.shutdown()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_command_exits_0_on_a_stop_signal(signum):
    """As PID 1 of its container, the receiver must end on `docker stop`'s SIGTERM itself:
    a process without a handler there is killed after the grace period (exit 137)."""
    command = [sys.executable, "-m", "dashboards.webhook", "--port", str(free_port())]
    with subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True) as process:
        assert "alert webhook on" in process.stderr.readline()
        process.send_signal(signum)
        assert process.wait(timeout=20) == 0
