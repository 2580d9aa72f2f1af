"""The collector's scrape receiver: one :class:`~collector.scrape.target.TargetLoop` per target.

Targets come from ``collector.scrape.targets`` and from ``collector.scrape.targets_file``, a
YAML list of targets with the same keys that rollout launchers write as engines come and go.
A watcher thread re-reads the file when its modification time (or size) changes: targets
that appeared start, targets that went stop and leave the ``up`` family, targets whose keys
changed restart. A version that is not valid YAML or not valid targets is logged and
counted once, and the previous list stays. A target in both places is the config's.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import yaml

from collector.scrape.config import ScrapeConfig, ScrapeTarget
from collector.scrape.health import ScrapeHealth
from collector.scrape.target import Deliver, TargetLoop
from telemetry.config.read import validate
from telemetry.model.errors import ConfigError

__all__ = ["Scraper"]

logger = logging.getLogger(__name__)

FILE_CHECK_S = 1.0


class Scraper:
    """Scrapes every configured target into the pipeline until :meth:`stop`.

    Args:
        config: the ``scrape`` section.
        deliver: hands each scrape to the pipeline (:meth:`collector.pipeline.Pipeline.receive`).
        health: where outcomes are counted (default: a new one).
        file_check_s: how often the targets file's modification time is looked at.
    """

    def __init__(
        self,
        config: ScrapeConfig,
        deliver: Deliver,
        health: ScrapeHealth | None = None,
        file_check_s: float = FILE_CHECK_S,
    ) -> None:
        self.config = config
        self.health = health or ScrapeHealth()
        self._deliver = deliver
        self._file_check_s = file_check_s
        self._lock = threading.Lock()
        self._loops: dict[str, TargetLoop] = {}
        self._file_targets: tuple[ScrapeTarget, ...] = ()
        self._file_version: tuple[int, int, int] | None = None
        self._stop = threading.Event()
        self._started = False
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        """Start scraping (and watching the targets file); returns at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        self.reload()
        if self.config.targets_file:
            self._watcher = threading.Thread(
                target=self._watch, name="rltel-scrape-targets", daemon=True
            )
            self._watcher.start()

    def targets(self) -> dict[str, ScrapeTarget]:
        """The targets scraped now, by URL."""
        with self._lock:
            return {url: loop.target for url, loop in self._loops.items()}

    def reload(self) -> None:
        """Read the targets file if it changed, then start and stop loops to match."""
        if self.config.targets_file:
            self._read_file(self.config.targets_file)
        wanted = {t.url: t for t in self._file_targets}
        wanted.update({t.url: t for t in self.config.targets})
        with self._lock:
            if self._stop.is_set():
                return
            for url in [u for u, loop in self._loops.items() if wanted.get(u) != loop.target]:
                self._loops.pop(url).stop()
                self.health.forget(url)
                logger.info("scrape: target %s removed", url)
            for url, target in wanted.items():
                if url not in self._loops:
                    loop = TargetLoop(
                        target,
                        self._deliver,
                        self.health,
                        self.config.timeout_s,
                        self.config.max_body_bytes,
                    )
                    self._loops[url] = loop
                    loop.start()
                    logger.info("scrape: target %s every %s s", url, target.interval_s)

    def _read_file(self, path: str) -> None:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            version = None
        else:
            version = (info.st_mtime_ns, info.st_size, info.st_ino)
        if version == self._file_version:
            return
        self._file_version = version
        if version is None:
            self._file_targets = ()
            logger.info("scrape: targets file %s absent: no targets from it", path)
            return
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
            if data is not None and not isinstance(data, list):
                raise ConfigError(f"{path} must hold a list of targets")
            section = validate(ScrapeConfig, {"targets": data or []}, path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ConfigError) as exc:
            self.health.file_error(path, str(exc))
            return
        self._file_targets = section.targets

    def _watch(self) -> None:
        while not self._stop.wait(self._file_check_s):
            try:
                self.reload()
            except Exception:  # a bug costs one look at the file, never the collector
                logger.exception("scrape: reloading the targets file failed")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every loop and the watcher, waiting up to ``timeout_s`` for them; safe twice."""
        self._stop.set()
        with self._lock:
            loops = list(self._loops.values())
        for loop in loops:
            loop.stop()
        deadline = time.monotonic() + timeout_s
        for loop in loops:
            loop.join(max(0.0, deadline - time.monotonic()))
        if self._watcher is not None:
            self._watcher.join(max(0.0, deadline - time.monotonic()))
