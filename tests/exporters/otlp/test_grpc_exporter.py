"""The OTLP sink's exporter wiring: TLS from files against a real TLS collector, retry
pushback from the collector's trailers."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.config import from_dict
from collector.server import CollectorServer
from rltel.logger import StatsLogger
from telemetry.config import OtlpTlsConfig, load_config
from telemetry.model.errors import ConfigError


def test_unknown_tls_key_is_named_by_the_schema_the_channel_reads():
    with pytest.raises(ConfigError, match=r"unknown key stats_logger\.otlp\.tls\.ca_path"):
        load_config({"otlp": {"endpoint": "h:1", "tls": {"ca_path": "x"}}})
    assert not OtlpTlsConfig().enabled  # an empty section: no TLS, as `insecure` says
    roots = Path(grpc.__file__).parent / "_cython" / "_credentials" / "roots.pem"  # a CA bundle
    assert OtlpTlsConfig(ca_file=str(roots)).enabled


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_stats_logger_sends_over_tls(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    server = CollectorServer(
        from_dict(
            {
                "receiver": {"port": 0, "tls": {"cert_file": str(cert), "key_file": str(key)}},
                "sinks": {"prometheus": {"port": 0}},
            }
        )
    )
    server.start()
    try:
        logger = StatsLogger(
            {
                "experiment_name": "tls",
                "trial_name": "t",
                "fileroot": str(tmp_path),
                "otlp": {
                    "endpoint": f"localhost:{server.port}",
                    "insecure": False,
                    "tls": {"ca_file": str(cert)},
                },
            }
        )
        logger.commit(0, 0, 3, {"ppo_actor/update/lr": 0.25})
        logger.close(timeout_s=20)
        deadline = time.monotonic() + 10
        value = None
        while value is None and time.monotonic() < deadline:
            body = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
            for family in text_string_to_metric_families(body):
                for sample in family.samples:
                    if sample.name == "ppo_actor_update_lr":
                        value = sample.value
            time.sleep(0.05)
        assert value == 0.25
        health = logger.health()["otlp"]
        assert health["points_failed"] == 0 and health["points_exported"] >= 1
    finally:
        server.stop(5)


def test_retry_pushback_reads_the_collectors_trailers():
    from collector.gate import retry_metadata
    from exporters.otlp.grpc_exporter import RETRY_INFO_KEY, retry_pushback

    assert retry_pushback(retry_metadata(0.25)) == 0.25  # grpc-retry-pushback-ms first
    info_only = [(k, v) for k, v in retry_metadata(1.5) if k == RETRY_INFO_KEY]
    assert retry_pushback(info_only) == 1.5  # else google.rpc.RetryInfo
    assert retry_pushback([("grpc-retry-pushback-ms", "0")]) == 0.0
    for bad in ("-1", "soon", "", "1.5", "9" * 400):  # negative, malformed, past a float
        assert retry_pushback([("grpc-retry-pushback-ms", bad)]) is None  # own backoff
    assert retry_pushback([("grpc-retry-pushback-ms", "1")]) == 0.001
    assert retry_pushback([("grpc-retry-pushback-ms", "9" * 300)]) == 1e297  # the caller caps
    assert retry_pushback([("grpc-retry-pushback-ms", "-0")]) == 0.0
    bad_ms = [("grpc-retry-pushback-ms", "soon"), *info_only]  # a bad pushback: no fallback
    assert retry_pushback(bad_ms) is None
    assert retry_pushback([(RETRY_INFO_KEY, b"\xff\xff")]) is None
    assert retry_pushback(None) is None and retry_pushback([("other", "1")]) is None
