"""The remote-write sink's config section (``collector.sinks.remote_write``) and label names."""

from __future__ import annotations

import re
from dataclasses import field
from urllib.parse import urlparse

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic.dataclasses import dataclass

from telemetry.config import SCHEMA
from telemetry.config.read import FieldRule

__all__ = ["CLUSTER_LABEL", "COLLECTOR_JOB", "COLLECTOR_LABEL", "RemoteWriteConfig"]

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
COLLECTOR_LABEL, CLUSTER_LABEL = "collector", "cluster"
COLLECTOR_JOB = "rltel-collector"
"""The ``job`` of the collector's own series (its scrape job; remote write uses it too)."""


@dataclass(frozen=True, config=SCHEMA)
class RemoteWriteConfig:
    """Prometheus remote write of the collector's series; disabled unless ``enabled``.

    Attributes:
        url: the receiver, e.g. ``http://prometheus:9090/api/v1/write`` (Mimir, Thanos
            Receive and VictoriaMetrics take the same protocol).
        collector: the ``collector`` external label; empty: this host's name.
        cluster: the ``cluster`` external label.
        external_labels: further labels added to every series (a series' own label wins).
        timeout_s: one HTTP request's timeout.
        interval_s: series not written for this long are written again at the current
            time (the scrape interval a scraping Prometheus would use), so unchanged series
            stay current; the collector's own metrics are written this often.
        max_pending_samples: the one bound on what waits for the receiver (an outage's
            backlog; the batch being sent comes on top); past it the oldest writes are
            dropped, logged once and counted, and every series' current total is written
            again. A trainer step of 632 samples (40 masked stats with 8 buckets, 70
            scalars and counters) a second fills the default in 791 s (about 80 MiB).
        max_batch_samples: samples per HTTP request at most (backlog sent in batches).
        max_sample_age_s: a write older than this when its turn comes is dropped and
            counted (``too_old``) instead of sent: receivers refuse samples past their
            accepted age, and the whole request with them (Prometheus: 1 h behind its
            newest sample; Mimir and Thanos Receive: their out-of-order window).
        self_metrics: also write the collector's own metrics (``rltel_collector_*``, the
            sink's counters and ``up``, as ``job="rltel-collector"``), so dashboards and
            alerts run on the shared store alone.
        series_limit, expire_seconds: as in the ``prometheus`` section.
    """

    enabled: StrictBool = False
    url: StrictStr | None = None
    collector: StrictStr = ""
    cluster: StrictStr = Field(default="default", min_length=1)
    external_labels: dict[StrictStr, StrictStr] = field(default_factory=dict)
    timeout_s: StrictFloat = Field(default=5.0, gt=0)
    interval_s: StrictFloat = Field(default=15.0, gt=0)
    max_pending_samples: StrictInt = Field(default=500_000, ge=1)
    max_batch_samples: StrictInt = Field(default=10_000, ge=1)
    max_sample_age_s: StrictFloat = Field(default=3000.0, gt=0)
    self_metrics: StrictBool = True
    series_limit: StrictInt = Field(default=2000, ge=1)
    expire_seconds: StrictFloat = Field(default=600.0, gt=0)

    def __post_init__(self) -> None:
        if self.url is not None:
            parsed = urlparse(self.url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise FieldRule("url", f"must be an http(s) URL, got {self.url!r}")
        elif self.enabled:
            raise FieldRule("url", "is required when remote_write is enabled")
        for name, value in self.external_labels.items():
            if not _LABEL.match(name) or name.startswith("__"):
                raise FieldRule("external_labels", f"{name!r} is not a Prometheus label name")
            if name in (COLLECTOR_LABEL, CLUSTER_LABEL):
                raise FieldRule("external_labels", f"{name!r}: set it with remote_write.{name}")
            if not value:
                raise FieldRule("external_labels", f"{name!r} has an empty value")
