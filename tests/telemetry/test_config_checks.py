"""What a config value names is checked when the config is read (issue 23, item 7): an OTLP
endpoint with a bad port or no port, TLS files that are missing or not PEM, a key that is
not the certificate's; each error names its key (no raw FileNotFoundError later)."""

from __future__ import annotations

import pytest

from collector.config import from_dict
from telemetry.config import load_config
from telemetry.model.errors import ConfigError
from tests.tls_files import needs_openssl, self_signed

ENDPOINT_RULE = "must be HOST:PORT or http(s)://HOST:PORT with a port 1-65535"


@pytest.mark.parametrize(
    "endpoint",
    [
        "127.0.0.1:4317",
        "localhost:1",
        "collector.example:65535",
        "[::1]:4317",
        "http://localhost:4317",
        "https://collector.example:443/",
    ],
)
def test_good_endpoints_are_taken(endpoint):
    assert load_config({"otlp": {"endpoint": endpoint}}).otlp.endpoint == endpoint


@pytest.mark.parametrize(
    "endpoint",
    [
        "127.0.0.1:70000",
        "127.0.0.1:65536",
        "127.0.0.1:0",
        "127.0.0.1",
        "garbage",
        ":4317",
        "::1:4317",
        "host:43x7",
        "host:-1",
        "host :4317",
        "grpc://host:4317",
        "http://host:4317/v1/metrics",
        "user@host:4317",
        "host:٤٣١٧",
    ],
)
def test_bad_endpoints_are_rejected_naming_the_key(endpoint):
    with pytest.raises(ConfigError) as caught:
        load_config({"otlp": {"endpoint": endpoint}})
    assert str(caught.value) == (
        f"stats_logger.otlp.endpoint {ENDPOINT_RULE} (IPv6 as [::1]:4317), got {endpoint!r}"
    )


@pytest.fixture(scope="module")
def pem(tmp_path_factory):
    """A certificate and its key, another certificate's key, a garbage file."""
    folder = tmp_path_factory.mktemp("pem")
    cert, key = self_signed(folder)
    _, other_key = self_signed(folder, "other")
    garbage = folder / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    return {
        "cert": str(cert),
        "key": str(key),
        "other_key": str(other_key),
        "garbage": str(garbage),
    }


def otlp_tls(**tls) -> dict:
    return {"otlp": {"endpoint": "localhost:4317", "insecure": False, "tls": tls}}


@needs_openssl
def test_good_tls_files_are_taken(pem):
    config = load_config(otlp_tls(ca_file=pem["cert"], cert_file=pem["cert"], key_file=pem["key"]))
    assert config.otlp.tls.ca_file == pem["cert"]
    receiver = {"tls": {"cert_file": pem["cert"], "key_file": pem["key"]}}
    assert from_dict({"receiver": receiver}).receiver.tls.enabled
    sink = {"prometheus": {"cert_file": pem["cert"], "key_file": pem["key"]}}
    assert load_config(sink).prometheus.cert_file == pem["cert"]


@needs_openssl
@pytest.mark.parametrize(
    ("tls", "key", "reason"),
    [
        ({"ca_file": "/nonexistent/ca.pem"}, "ca_file", "names no file: '/nonexistent/ca.pem'"),
        ({"ca_file": "garbage"}, "ca_file", "is not a PEM certificate file: 'GARBAGE'"),
        ({"ca_file": "key"}, "ca_file", "is not a PEM certificate file: 'KEY'"),
        ({"cert_file": "garbage", "key_file": "key"}, "cert_file", "is not a PEM certificate"),
        ({"cert_file": "cert", "key_file": "/nonexistent.key"}, "key_file", "names no file"),
        ({"cert_file": "cert", "key_file": "garbage"}, "key_file", "is not the unencrypted PEM"),
        (
            {"cert_file": "cert", "key_file": "other_key"},
            "key_file",
            "is not the unencrypted PEM private key of cert_file",
        ),
    ],
)
def test_bad_tls_files_name_their_key_at_config_time(pem, tls, key, reason):
    files = {name: pem.get(value, value) for name, value in tls.items()}
    reason = reason.replace("GARBAGE", pem["garbage"]).replace("KEY", pem["key"])
    with pytest.raises(ConfigError) as caught:
        load_config(otlp_tls(**files))
    assert str(caught.value).startswith(f"stats_logger.otlp.tls.{key} {reason}")
    if "ca_file" in files:
        return
    with pytest.raises(ConfigError) as caught:  # the collector's receiver: the same rule
        from_dict({"receiver": {"tls": files}})
    assert str(caught.value).startswith(f"collector.receiver.tls.{key} {reason}")
    with pytest.raises(ConfigError) as caught:  # and the Prometheus endpoint's
        from_dict({"sinks": {"prometheus": files}})
    assert str(caught.value).startswith(f"collector.sinks.prometheus.{key} {reason}")


def test_a_prometheus_token_file_must_hold_a_token(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path in (empty, tmp_path / "missing"):
        with pytest.raises(ConfigError) as caught:
            load_config({"prometheus": {"token_file": str(path)}})
        assert str(caught.value) == (
            f"stats_logger.prometheus.token_file names no file, or an empty one: {str(path)!r}"
        )
    (tmp_path / "token").write_text("t0ken\n")
    config = load_config({"prometheus": {"token_file": str(tmp_path / "token")}})
    assert config.prometheus.token() == "t0ken"
    with pytest.raises(ConfigError, match=r"stats_logger\.prometheus\.key_file is required"):
        load_config({"prometheus": {"cert_file": str(tmp_path / "token")}})
