"""/metrics over HTTPS and behind a bearer token (issue 23, item 6), off by default: read
with urllib trusting the test certificate, and scraped by a real Prometheus with
``tls_config`` and ``authorization`` (the collector's endpoint)."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request

import pytest

from collector.config import from_dict
from collector.server import CollectorServer
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig, load_config
from telemetry.model.errors import ConfigError
from telemetry.model.snapshot import Gauge, Snapshot, Step
from tests.dashboards.servers import api, prometheus
from tests.tls_files import needs_openssl, self_signed

TOKEN = "m3trics-t0ken"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(folder)
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    return {"cert_file": str(cert), "key_file": str(key), "token_file": str(token)}


def get(url: str, token: str | None = None, cafile: str | None = None) -> tuple[int, dict, str]:
    """``(status, headers, body)`` of a GET; an HTTP error status is returned, not raised."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


@pytest.fixture
def sink_with():
    sinks = []

    def make(**options) -> PrometheusSink:
        sink = PrometheusSink(PrometheusConfig(port=0, **options))
        sink.export(Snapshot((Gauge("loss", 0.5),), Step(0, 1, 1), (("service.name", "t"),)))
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.shutdown()


@needs_openssl
def test_https_with_a_bearer_token(sink_with, files):
    sink = sink_with(**files)
    assert sink.url.startswith("https://127.0.0.1:")
    cafile = files["cert_file"]
    for token in (None, "wrong", TOKEN[:-1], TOKEN + "x"):
        status, headers, body = get(sink.url, token, cafile)
        assert status == 401, token
        assert headers["WWW-Authenticate"] == 'Bearer realm="rltel"'
        assert "loss" not in body
    status, _, body = get(sink.url, TOKEN, cafile)
    assert status == 200 and "\nloss{" in body
    status, _, body = get(sink.url.replace("/metrics", "/healthz"), TOKEN, cafile)
    assert (status, body) == (200, "ok\n")
    with pytest.raises(urllib.error.URLError):  # the certificate is not trusted by default
        get(sink.url, TOKEN)
    with pytest.raises((ConnectionError, urllib.error.URLError)):  # plaintext to the TLS port
        get(sink.url.replace("https://", "http://"), TOKEN)
    assert get(sink.url, TOKEN, cafile)[0] == 200  # still serving


@needs_openssl
def test_https_alone_and_a_token_alone(sink_with, files):
    tls = sink_with(cert_file=files["cert_file"], key_file=files["key_file"])
    assert get(tls.url, cafile=files["cert_file"])[0] == 200
    token = sink_with(token_file=files["token_file"])
    assert token.url.startswith("http://")
    assert get(token.url)[0] == 401
    assert get(token.url, TOKEN)[0] == 200
    assert get(sink_with().url)[0] == 200  # off by default


def test_a_token_file_gone_by_the_time_the_sink_starts_fails_closed(tmp_path):
    token = tmp_path / "token"
    token.write_text("t\n")
    config = load_config({"prometheus": {"enabled": True, "port": 0, "token_file": str(token)}})
    token.unlink()
    with pytest.raises(ConfigError) as caught:
        PrometheusSink(config.prometheus, key="stats_logger.prometheus")
    assert str(caught.value) == f"stats_logger.prometheus.token_file: no token in {str(token)!r}"


@needs_openssl
def test_prometheus_scrapes_the_collector_over_https_with_the_token(tmp_path, files):
    server = CollectorServer(
        from_dict({"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0, **files}}})
    )
    server.start()
    target = server.metrics_url.removeprefix("https://").removesuffix("/metrics")
    tls = {"ca_file": files["cert_file"]}
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "with-token",
                "scheme": "https",
                "tls_config": tls,
                "authorization": {"credentials_file": files["token_file"]},
                "static_configs": [{"targets": [target]}],
            },
            {
                "job_name": "without-token",
                "scheme": "https",
                "tls_config": tls,
                "static_configs": [{"targets": [target]}],
            },
        ],
    }
    try:
        with prometheus(tmp_path, config) as url:
            deadline, up = time.monotonic() + 60, {}
            while len(up) < 2 and time.monotonic() < deadline:
                up = {
                    r["metric"]["job"]: float(r["value"][1])
                    for r in api(url, "query", query="up")["result"]
                }
                time.sleep(0.2)
            assert up == {"with-token": 1.0, "without-token": 0.0}
            started = api(url, "query", query='process_start_time_seconds{job="with-token"}')
            assert len(started["result"]) == 1
    finally:
        server.stop(5)
