"""`rltel collector`'s command line: the port options, and a port in use as one line (exit 2)
naming its config key and the option that overrides it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

RLTEL = Path(sys.executable).with_name("rltel")
ANY_PORTS = ("--otlp-port", "0", "--prometheus-port", "0")
IN_USE = "is in use; choose another port, or 0 for any free port"


def collector(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RLTEL), "collector", *args], capture_output=True, text=True, timeout=120
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one stderr line of a collector that refused to start (exit 2, no traceback)."""
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@contextlib.contextmanager
def listening() -> Iterator[int]:
    """A loopback port something listens on (without SO_REUSEPORT), for the block's time."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@contextlib.contextmanager
def running_collector(*args: str) -> Iterator[tuple[int, int]]:
    """``rltel collector ARGS`` until the block ends; yields its OTLP and Prometheus ports."""
    proc = subprocess.Popen(
        [str(RLTEL), "collector", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "WANDB_SILENT": "true"},
    )
    try:
        line = proc.stdout.readline()  # "rltel collector: otlp=HOST:PORT metrics=URL"
        assert line.startswith("rltel collector: otlp="), line
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        with urllib.request.urlopen(fields["metrics"], timeout=10) as response:
            assert response.status == 200
        metrics_port = int(fields["metrics"].rsplit(":", 1)[1].split("/")[0])
        yield int(fields["otlp"].rsplit(":", 1)[1]), metrics_port
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_help_lists_the_port_options_with_their_keys():
    result = collector("--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "--otlp-port PORT" in text and "receiver.port" in text
    assert "--prometheus-port PORT" in text and "sinks.prometheus.port" in text


def test_a_busy_otlp_port_names_receiver_port_and_the_option():
    with listening() as port:
        result = collector("--otlp-port", str(port), "--prometheus-port", "0")
    assert error_line(result) == (
        f"rltel collector: error: collector.receiver.port: 127.0.0.1:{port} {IN_USE}"
        " (--otlp-port overrides it)"
    )


def test_a_busy_prometheus_port_from_the_config_names_its_key_and_the_option(tmp_path: Path):
    with listening() as port:
        config = tmp_path / "collector.yaml"
        config.write_text(yaml.safe_dump({"collector": {"sinks": {"prometheus": {"port": port}}}}))
        result = collector("--config", str(config), "--otlp-port", "0")
    assert error_line(result) == (
        f"rltel collector: error: collector.sinks.prometheus.port: 127.0.0.1:{port} {IN_USE}"
        " (--prometheus-port overrides it)"
    )


def test_a_second_collector_on_the_same_otlp_port_fails_instead_of_sharing_it():
    with running_collector("--otlp-port", "0", "--prometheus-port", "0") as (otlp, metrics):
        assert otlp not in (0, 4317) and metrics not in (0, 9464)  # the options were used
        result = collector("--otlp-port", str(otlp), "--prometheus-port", "0")
        assert f"collector.receiver.port: 127.0.0.1:{otlp} {IN_USE}" in error_line(result)


def test_the_port_options_override_the_config_file(tmp_path: Path):
    config = tmp_path / "collector.yaml"
    sections = {"receiver": {"port": 5555}, "sinks": {"prometheus": {"port": 6666}}}
    config.write_text(yaml.safe_dump({"collector": sections}))
    result = collector(
        "--config", str(config), "--otlp-port", "0", "--prometheus-port", "7777", "--print-config"
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    effective = yaml.safe_load(result.stdout)["collector"]
    assert effective["receiver"]["port"] == 0
    assert effective["sinks"]["prometheus"]["port"] == 7777
    result = collector("--config", str(config), "--print-config")
    assert yaml.safe_load(result.stdout)["collector"]["receiver"]["port"] == 5555


def test_a_prometheus_port_for_a_disabled_endpoint_is_one_line(tmp_path: Path):
    config = tmp_path / "collector.yaml"
    config.write_text(yaml.safe_dump({"collector": {"sinks": {"prometheus": {"enabled": False}}}}))
    line = error_line(collector("--config", str(config), "--prometheus-port", "9999"))
    assert line.startswith("rltel collector: error: argument --prometheus-port: ")
    assert "sinks.prometheus.enabled: false" in line


def host_config(tmp_path: Path, section: str, host: str) -> Path:
    """A collector config setting ``host`` in ``receiver`` or ``sinks.prometheus``."""
    body = {"host": host}
    document = {"receiver": body} if section == "receiver" else {"sinks": {"prometheus": body}}
    config = tmp_path / "collector.yaml"
    config.write_text(yaml.safe_dump({"collector": document}))
    return config


@pytest.mark.parametrize("section", ["receiver", "sinks.prometheus"])
def test_a_host_that_does_not_resolve_is_one_line_naming_its_host_key(tmp_path, section):
    config = host_config(tmp_path, section, "999.1.1.1")
    line = error_line(collector("--config", str(config), *ANY_PORTS))
    assert line.startswith(
        f"rltel collector: error: collector.{section}.host: 999.1.1.1 does not resolve ("
    )
    assert "overrides it" not in line  # the host, not the port


@pytest.mark.parametrize("section", ["receiver", "sinks.prometheus"])
def test_an_address_of_another_machine_is_one_line_naming_its_host_key(tmp_path, section):
    config = host_config(tmp_path, section, "10.255.255.1")
    line = error_line(collector("--config", str(config), *ANY_PORTS))
    assert line == (
        f"rltel collector: error: collector.{section}.host: 10.255.255.1 is not an address of "
        "this machine (Cannot assign requested address)"
    )


def test_a_fileroot_that_cannot_hold_the_state_is_named_as_sinks_fileroot(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = tmp_path / "collector.yaml"
    fileroot = blocker / "runs"
    config.write_text(yaml.safe_dump({"collector": {"sinks": {"fileroot": str(fileroot)}}}))
    result = collector("--config", str(config), "--otlp-port", "0", "--prometheus-port", "0")
    state = re.escape(str(fileroot / ".collector-state")) + r"/\d+"
    assert re.fullmatch(
        f"rltel collector: error: collector.sinks.fileroot: cannot use ({state}): "
        r"\[Errno 20\] Not a directory: '\1'",
        error_line(result),
    )


def test_a_yaml_syntax_error_is_one_line_with_its_line_and_column(tmp_path: Path):
    config = tmp_path / "collector.yaml"
    config.write_text("collector:\n  receiver:\n    port: [1\n  sinks: {}\n")
    line = error_line(collector("--config", str(config)))
    assert line == (
        f"rltel collector: error: collector config {str(config)!r} is not valid YAML: line 4, "
        "column 8: expected ',' or ']', but got ':' (while parsing a flow sequence)"
    )


@pytest.mark.parametrize("text", ["", "# every key left to its default\n", "collector:\n"])
def test_a_config_that_sets_nothing_is_refused_in_one_line(tmp_path: Path, text: str):
    config = tmp_path / "collector.yaml"
    config.write_text(text)
    line = error_line(collector("--config", str(config), "--otlp-port", "0"))
    assert line == (
        f"rltel collector: error: collector: {str(config)!r} sets nothing (an empty file, or "
        "collector: with no key under it); write the collector: section, or leave out --config "
        "for the built-in defaults"
    )
