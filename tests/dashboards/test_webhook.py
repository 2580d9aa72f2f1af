"""The example Alertmanager webhook receiver: what it accepts, keeps and logs."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest

from dashboards.webhook import WebhookReceiver

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
