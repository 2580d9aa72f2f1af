"""Fixtures: a real collector on free loopback ports, and a parsed /metrics scrape."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.config import from_dict
from collector.server import CollectorServer


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted label items): value}`` of one /metrics scrape."""
    body = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def samples(scraped: dict, name: str, **labels) -> dict[tuple, float]:
    """The samples called ``name`` whose labels include ``labels``."""
    want = {(k, str(v)) for k, v in labels.items()}
    return {lab: v for (n, lab), v in scraped.items() if n == name and want <= set(lab)}


@pytest.fixture
def start_collector() -> Iterator:
    """``start_collector(**sections) -> CollectorServer`` on free ports, stopped afterwards."""
    servers: list[CollectorServer] = []

    def start(**sections) -> CollectorServer:
        sections.setdefault("receiver", {})
        sections["receiver"] = {"port": 0, **sections["receiver"]}
        sinks = sections.setdefault("sinks", {})
        sinks["prometheus"] = {"port": 0, **sinks.get("prometheus", {})}
        server = CollectorServer(from_dict(sections))
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop(10)
