"""The ``collector.scrape`` section: Prometheus endpoints the collector scrapes into runs.

The scrape receiver's own section, in its folder (:mod:`collector.config` holds it as
``scrape``); the receiver is :mod:`collector.scrape`.
"""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import Field, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config.read import FieldRule

__all__ = ["ScrapeConfig", "ScrapeTarget"]


@dataclass(frozen=True, config=SCHEMA)
class ScrapeTarget:
    """One Prometheus endpoint scraped into a run (a vLLM or SGLang server's ``/metrics``).

    Attributes:
        url: the endpoint, ``http(s)://host:port/path``; its ``host:port`` is the
            ``instance`` label of its series.
        experiment, trial: the run its series and engine figures join (no ``/``).
        role: the ``role`` label of its series.
        interval_s: seconds from one scrape's start to the next.
    """

    url: StrictStr
    experiment: StrictStr = Field(min_length=1)
    trial: StrictStr = Field(min_length=1)
    role: StrictStr = Field(default="rollout-engine", min_length=1)
    interval_s: StrictFloat = Field(default=10.0, gt=0)

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise FieldRule("url", f"must be an http(s) URL, got {self.url!r}")
        for name in ("experiment", "trial"):
            if "/" in getattr(self, name):
                raise FieldRule(name, f"must not contain '/', got {getattr(self, name)!r}")


@dataclass(frozen=True, config=SCHEMA)
class ScrapeConfig:
    """Prometheus endpoints the collector scrapes (as the OTel Collector's prometheus receiver).

    Attributes:
        targets: the endpoints scraped from the start.
        targets_file: a YAML list of further targets (the keys of ``targets``) that rollout
            launchers write; re-read when its modification time changes, a bad version
            logged and the previous list kept.
        timeout_s: one scrape's deadline (connect, answer and body together).
        max_body_bytes: a larger answer counts as a failed scrape.
    """

    targets: tuple[ScrapeTarget, ...] = ()
    targets_file: StrictStr | None = None
    timeout_s: StrictFloat = Field(default=5.0, gt=0)
    max_body_bytes: StrictInt = Field(default=32 * 1024 * 1024, ge=1)

    def __post_init__(self) -> None:
        urls = [target.url for target in self.targets]
        repeated = sorted({url for url in urls if urls.count(url) > 1})
        if repeated:
            raise FieldRule("targets", f"lists {', '.join(repeated)} more than once")
