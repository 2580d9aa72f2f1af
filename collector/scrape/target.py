"""One scrape target on its own thread: fetch, convert, hand to the pipeline, every interval.

A fetch is bounded by ``scrape.timeout_s`` as a whole (connect, answer and every read: a
target that trickles bytes is cut off at the deadline) and by ``scrape.max_body_bytes``; a
target that is down, slow or serves something other than the Prometheus text format costs
only its own thread, is counted by reason and logged once per state change
(:class:`~collector.scrape.health.ScrapeHealth`).
"""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlparse

from collector.scrape.config import ScrapeTarget
from collector.scrape.convert import Converter
from collector.scrape.engine_figures import engine_figures
from collector.scrape.health import ScrapeHealth
from telemetry.model import names
from telemetry.model.snapshot import Attributes, Snapshot, Step

__all__ = ["Deliver", "ScrapeError", "TargetLoop", "fetch"]

logger = logging.getLogger(__name__)

ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
CHUNK = 64 * 1024
STREAM = "engine"
"""The stream of the engine figures in the step-based sinks (W&B plots them against
``engine/step``, the training step they were aligned to)."""

Deliver = Callable[[Snapshot, Callable[[Step | None], Snapshot | None]], bool]
"""``(snapshot, figures_at) -> kept``: :meth:`collector.pipeline.Pipeline.deliver`."""


class ScrapeError(Exception):
    """A failed fetch; ``reason`` is one of :data:`collector.scrape.health.REASONS`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def fetch(url: str, timeout_s: float, max_bytes: int) -> str:
    """The body of ``GET url`` as text, within ``timeout_s`` in all.

    Raises:
        ScrapeError: no connection, a status other than 200, past the deadline or the size
            bound, or a body that is not UTF-8.
    """
    deadline = time.monotonic() + timeout_s
    parsed = urlparse(url)
    https = parsed.scheme == "https"
    connection_type = http.client.HTTPSConnection if https else http.client.HTTPConnection
    connection = connection_type(parsed.hostname, parsed.port, timeout=timeout_s)
    path = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    try:
        connection.request("GET", path, headers={"Accept": ACCEPT})
        sock = connection.sock  # the response reads it after the connection lets go of it
        parts, size = [], 0
        _wait_at_most(sock, deadline)
        response = connection.getresponse()
        if response.status != 200:
            raise ScrapeError("status", f"HTTP {response.status} {response.reason}")
        while True:
            _wait_at_most(sock, deadline)
            chunk = response.read1(CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise ScrapeError("too_large", f"answer over {max_bytes} bytes")
            parts.append(chunk)
    except TimeoutError:
        raise ScrapeError("timeout", f"no complete answer within {timeout_s} s") from None
    except http.client.HTTPException as exc:
        raise ScrapeError("status", f"not an HTTP answer: {exc!r}") from None
    except OSError as exc:
        raise ScrapeError("down", str(exc)) from None
    finally:
        connection.close()
    try:
        return b"".join(parts).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError("bad_text", f"not UTF-8: {exc}") from None


def _wait_at_most(sock: socket.socket, deadline: float) -> None:
    """Let the next read on ``sock`` block only until ``deadline``."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


def instance_of(url: str) -> str:
    """``host:port`` of ``url`` (the ``instance`` label, as Prometheus sets it)."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{parsed.hostname}:{port}"


class TargetLoop:
    """Scrapes one target every ``interval_s`` on a named daemon thread until :meth:`stop`.

    Args:
        target: the target.
        deliver: hands each scrape to the pipeline.
        health: where its outcome is counted.
        timeout_s: one scrape's deadline.
        max_bytes: the largest answer taken.
    """

    def __init__(
        self,
        target: ScrapeTarget,
        deliver: Deliver,
        health: ScrapeHealth,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        self.target = target
        self.instance = instance_of(target.url)
        self._deliver = deliver
        self._health = health
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._converter = Converter()
        self._last_ok: float | None = None
        self._errors = 0  # scrapes in a row that raised (a bug): logged at the first
        self._stop = threading.Event()
        self.resource: Attributes = (
            ("service.name", target.role),
            ("service.instance.id", self.instance),
            (names.EXPERIMENT, target.experiment),
            (names.TRIAL, target.trial),
            (names.ROLE, target.role),
        )
        self._figure_attributes: Attributes = (("instance", self.instance),)
        health.watch(target, self.instance)
        self._thread = threading.Thread(
            target=self._run, name=f"rltel-scrape-{self.instance}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after its current scrape (it is a daemon: nothing waits)."""
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.scrape_once()
                self._errors = 0
            except Exception:  # a bug costs one scrape, never the collector; logged once
                self._errors += 1
                if self._errors == 1:
                    logger.exception("scrape %s failed (once until a scrape ends)", self.target.url)
            self._stop.wait(max(0.0, self.target.interval_s - (time.monotonic() - began)))

    def scrape_once(self) -> bool:
        """Scrape now; True when the target answered with a valid exposition."""
        url = self.target.url
        began = time.monotonic()
        try:
            text = fetch(url, self._timeout_s, self._max_bytes)
            scraped = self._converter.convert(text)
        except ScrapeError as exc:
            self._health.failed(url, exc.reason, time.monotonic() - began, str(exc))
            return False
        except (ValueError, ArithmeticError) as exc:  # not the text format, or counts past int
            self._health.failed(url, "bad_text", time.monotonic() - began, str(exc))
            return False
        now = time.monotonic()
        elapsed = None if self._last_ok is None else now - self._last_ok
        self._last_ok = now
        figures = engine_figures(scraped, elapsed, self._figure_attributes)
        stamp = time.time_ns()
        snapshot = Snapshot(scraped.points, None, self.resource, stamp, STREAM)
        run_resource = self.resource[2:]

        def figures_at(step: Step | None) -> Snapshot | None:
            if not figures:
                return None
            at = step if step is not None else Step(0, 0, 0)
            return Snapshot(figures, at, run_resource, stamp, STREAM)

        try:
            kept, why = self._deliver(snapshot, figures_at), "memory budget or queue full"
        except Exception as exc:  # e.g. the run's sinks cannot start: this scrape is dropped
            kept, why = False, f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - began
        self._health.succeeded(url, seconds, len(scraped.points), None if kept else why)
        return True
