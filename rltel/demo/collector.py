"""``rltel demo --collector``: a real ``rltel collector`` subprocess on free loopback ports.

The demo writes a collector config to a temporary file (receiver on any free port,
Prometheus on the demo's ``--prometheus-port``, by default any free port too, W&B and SwanLab
offline, Trackio local and TensorBoard under the demo's fileroot, in the run layout the
embedded demo writes), starts ``rltel collector --config`` and reads the endpoints it announces.
:meth:`DemoCollector.stop` drains it with SIGTERM and waits for its exit status. The
collector's output goes to ``<run dir>/collector.log``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

import telemetry
from rltel.demo.options import PROMETHEUS_HOST, DemoOptions

EXPERIMENT, TRIAL = "rltel-demo", "trial0"
ANNOUNCE = "rltel collector: otlp="
START_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0


def collector_config(options: DemoOptions) -> dict:
    """The collector's YAML document for this demo run."""
    return {
        "collector": {
            "receiver": {"host": PROMETHEUS_HOST, "port": 0},
            "limits": {"drain_timeout_s": 60.0},
            "sinks": {
                "fileroot": options.fileroot,
                "wandb": {"mode": "offline", "project": EXPERIMENT},
                "swanlab": {"mode": "offline", "project": EXPERIMENT},
                "trackio": {"mode": "local", "project": EXPERIMENT},
                # on, rooted at the fileroot: <fileroot>/<experiment>/<trial>/tensorboard
                "tensorboard": {"path": options.fileroot},
                "prometheus": {
                    "enabled": True,
                    "host": PROMETHEUS_HOST,
                    "port": options.prometheus_port,
                },
            },
        }
    }


def metrics_url_of(endpoint: str, port: int) -> str:
    """``http://HOST:port/metrics`` on the host of the OTLP ``endpoint`` (``HOST:PORT``)."""
    host = endpoint.rpartition(":")[0]
    return f"http://{host}:{port}/metrics"


class CollectorFailed(RuntimeError):
    """The collector did not start, or did not drain and exit 0."""


class DemoCollector:
    """One ``rltel collector`` process; ``endpoint`` and ``metrics_url`` once it has started."""

    def __init__(self, options: DemoOptions, config_path: Path, log_path: Path) -> None:
        config_path.write_text(yaml.safe_dump(collector_config(options), sort_keys=False))
        repo = str(Path(telemetry.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rltel.cli", "collector", "--config", str(config_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C stops the demo, which then drains the collector
        )
        self.endpoint, self.metrics_url = "", ""
        self._announced = threading.Event()
        self._reader = threading.Thread(target=self._read, name="demo-collector-log", daemon=True)
        self._reader.start()
        if not self._announced.wait(START_TIMEOUT_S) or not self.endpoint:
            self.stop()
            raise CollectorFailed(f"the collector did not start; see {log_path}:\n{self.tail()}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            if line.startswith(ANNOUNCE):
                fields = dict(part.split("=", 1) for part in line.split()[2:])
                self.endpoint, self.metrics_url = fields["otlp"], fields["metrics"]
                self._announced.set()
        self._announced.set()  # exited before announcing

    def tail(self, lines: int = 15) -> str:
        """The last lines the collector wrote."""
        self._log.flush()
        return "\n".join(self.log_path.read_text().splitlines()[-lines:])

    def stop(self, timeout_s: float = DRAIN_TIMEOUT_S) -> int:
        """SIGTERM (drain every sink, finish W&B/SwanLab runs), wait; the exit status.

        A collector that does not exit within ``timeout_s`` is killed (status -9).
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(max(1.0, timeout_s - (time.monotonic() - start)))
        self._log.close()
        return code
