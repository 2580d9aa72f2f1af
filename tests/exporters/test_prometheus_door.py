"""The Prometheus endpoint's token door (issue 38, item 6): the header rule at its
boundaries (``Bearer`` in any case, one or more spaces, optional whitespace around the value;
a tab or a space inside the token refused), and refusals logged by the real ``rltel
collector``, one line per client and then once a minute, never the token sent."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from telemetry.model.snapshot import Gauge, Snapshot, Step

RLTEL = Path(sys.executable).with_name("rltel")
TOKEN = "m3trics-t0ken"


def status(url: str, authorization: str | None) -> int:
    """The status of ``GET url`` sending this exact ``Authorization`` value (or none)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.putrequest("GET", parts.path)
        if authorization is not None:
            connection.putheader("Authorization", authorization)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.fixture(scope="module")
def sink(tmp_path_factory) -> Iterator[PrometheusSink]:
    token = tmp_path_factory.mktemp("door") / "token"
    token.write_text(TOKEN + "\n")
    sink = PrometheusSink(PrometheusConfig(port=0, token_file=str(token)))
    sink.export(Snapshot((Gauge("loss", 0.5),), Step(0, 1, 1), (("service.name", "t"),)))
    yield sink
    sink.shutdown()


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        (f"Bearer {TOKEN}", 200),
        (f"bearer {TOKEN}", 200),  # the scheme is case-insensitive (RFC 7235 2.1)
        (f"BeArEr {TOKEN}", 200),
        (f"Bearer  {TOKEN}", 200),  # 1*SP (RFC 6750 2.1)
        (f"Bearer {TOKEN}  ", 200),  # optional whitespace around the value (RFC 9110 5.5)
        (f"Bearer\t{TOKEN}", 401),  # a tab is not SP
        (f"Bearer \t{TOKEN}", 401),
        (f"Bearer {TOKEN} x", 401),
        (f"Bearer {TOKEN[:-1]}", 401),
        (f"Bearer {TOKEN}x", 401),
        (f"Bearer{TOKEN}", 401),
        ("Bearer", 401),
        ("Bearer ", 401),
        (f"Basic {TOKEN}", 401),
        (TOKEN, 401),
        (None, 401),
    ],
)
def test_the_header_rule_at_its_boundaries(sink, authorization, code):
    assert status(sink.url, authorization) == code


def test_the_collector_logs_refused_scrapes_once_per_client_per_minute(tmp_path):
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    config = tmp_path / "collector.yaml"
    prometheus = {"port": 0, "token_file": str(token)}
    config.write_text(yaml.safe_dump({"collector": {"sinks": {"prometheus": prometheus}}}))
    proc = subprocess.Popen(
        [str(RLTEL), "collector", "--config", str(config), "--otlp-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "WANDB_SILENT": "true"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        announced = proc.stdout.readline()
        assert announced.startswith("rltel collector: otlp="), announced
        url = dict(part.split("=", 1) for part in announced.split()[2:])["metrics"]
        for sent in (f"Bearer {TOKEN}x", None, "Basic x", f"Bearer {TOKEN}x"):
            assert status(url, sent) == 401
        assert status(url, f"bearer {TOKEN}") == 200
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
        reader.join(30)
    refused = [line.split(" WARNING ", 1)[1] for line in lines if "refused" in line]
    assert refused == [
        "exporters.prometheus.serving: prometheus endpoint: refused an unauthenticated request "
        "from 127.0.0.1: wrong bearer token\n"
    ]
    assert not any(TOKEN in line for line in lines)
