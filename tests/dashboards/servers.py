"""Real Prometheus and Alertmanager processes on free loopback ports, stopped by PID.

Both run from the repository's own configs: Prometheus from ``prometheus.yml`` with only
the scrape targets, the rule file and (when asked) the intervals replaced; Alertmanager from
``alertmanager.yml`` with only the webhook URLs pointed at a local receiver. A
:class:`FrozenTarget` serves expositions that change only when the test says so.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from tests.distributed import free_port

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_YML = ROOT / "dashboards/prometheus/prometheus.yml"
ALERTMANAGER_YML = ROOT / "dashboards/alertmanager/alertmanager.yml"
COLLECTOR_JOB = "rltel-collector"


def get(url: str, timeout: float = 2.0) -> bytes:
    """The body of a GET on ``url``."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def api(prometheus: str, path: str, **params: object) -> object:
    """``data`` of a Prometheus HTTP API answer (``/api/v1/<path>``)."""
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    body = json.loads(get(f"{prometheus}/api/v1/{path}?{query}", timeout=10))
    assert body["status"] == "success", body
    return body["data"]


def until(condition: Callable[[], object], timeout: float = 60.0) -> object:
    """Poll ``condition`` (a query that fills in once Prometheus has scraped) until it
    returns something truthy or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    return condition()


def _wait_ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited: {log.read_text()[-2000:]}")
        try:
            get(url)
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} not ready in 20 s: {log.read_text()[-2000:]}")


@contextmanager
def _process(args: list[str], log: Path, ready_path: str, port: int) -> Iterator[str]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url + ready_path, proc, log)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def alertmanager_config(webhook: str | None) -> dict:
    """The repository's Alertmanager config, every webhook URL replaced by ``webhook``."""
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    if webhook is not None:
        for receiver in config["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = webhook
    return config


@contextmanager
def alertmanager(tmp_path: Path, webhook: str | None = None) -> Iterator[str]:
    """A real Alertmanager on the repository's config; yields its base URL."""
    port = free_port()
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(alertmanager_config(webhook)))
    args = [
        "prometheus-alertmanager",
        f"--config.file={path}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with _process(args, tmp_path / "alertmanager.log", "/-/ready", port) as url:
        yield url


def prometheus_config(target: str, alertmanager_url: str | None, rules: Path, fast: bool) -> dict:
    """The repository's prometheus.yml scraping only ``target`` as the collector job.

    Args:
        target: ``host:port`` of the rltel metrics endpoint.
        alertmanager_url: where alerts go; None sends none.
        rules: the rule file to load.
        fast: 1 s scrape and evaluation intervals instead of the shipped ones.
    """
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["rule_files"] = [str(rules)]
    if alertmanager_url is None:
        del config["alerting"]
    else:
        am = config["alerting"]["alertmanagers"][0]["static_configs"][0]
        am["targets"] = [alertmanager_url.removeprefix("http://")]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == COLLECTOR_JOB)
    job["static_configs"][0]["targets"] = [target]
    config["scrape_configs"] = [job]
    if fast:
        config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
        job.pop("scrape_interval", None)
        job.pop("scrape_timeout", None)
    return config


@contextmanager
def prometheus(tmp_path: Path, config: dict) -> Iterator[str]:
    """A real Prometheus on ``config`` (see :func:`prometheus_config`); yields its base URL."""
    port = free_port()
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    args = [
        "prometheus",
        f"--config.file={path}",
        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _process(args, tmp_path / "prometheus.log", "/-/ready", port) as url:
        yield url


class FrozenTarget:
    """A scrape target on a free loopback port serving the last exposition published.

    A live endpoint changes while a step is in flight (the collector counts a request
    before its sink has the request's series), so a scrape could see half a step. Publishing
    only settled expositions gives each scrape one whole state; :meth:`wait_scraped`
    returns once a scrape has read the latest. Answers 503 until the first publish.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._published: tuple[bytes, str, threading.Event] | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _frozen_handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` to scrape."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    def publish(self, body: bytes, content_type: str) -> None:
        """Serve ``body`` from now on, to every scrape until the next publish."""
        with self._lock:
            self._published = (body, content_type, threading.Event())

    def latest(self) -> tuple[bytes, str, threading.Event] | None:
        """The exposition served now and the event set once a scrape has read it."""
        with self._lock:
            return self._published

    def wait_scraped(self, timeout_s: float = 10.0) -> None:
        """Wait until a scrape has read the latest exposition."""
        published = self.latest()
        assert published is not None, "nothing published"
        assert published[2].wait(timeout_s), f"no scrape of the exposition in {timeout_s} s"

    def close(self) -> None:
        """Stop serving; safe to call twice."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> FrozenTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _frozen_handler(target: FrozenTarget) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            published = target.latest()
            if published is None:
                self.send_error(503, "nothing published yet")
                return
            body, content_type, read = published
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            read.set()

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are not logged."""

    return Handler
