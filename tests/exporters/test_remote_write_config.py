"""The ``remote_write`` config section (exporters.remote_write.config): its bounds and rules,
each named by its key."""

from __future__ import annotations

import dataclasses

import pytest

from collector.config import from_dict
from exporters.remote_write.config import RemoteWriteConfig
from telemetry.model.errors import ConfigError

URL = "http://x/api/v1/write"


def _section(**section) -> RemoteWriteConfig:
    return from_dict({"sinks": {"remote_write": section}}).sinks.remote_write


@pytest.mark.parametrize(
    "key, bad, good",
    [
        ("timeout_s", 0.0, 1e-3),
        ("interval_s", 0.0, 1e-3),
        ("max_sample_age_s", 0.0, 1e-3),
        ("expire_seconds", 0.0, 1e-3),
        ("max_pending_samples", 0, 1),
        ("max_batch_samples", 0, 1),
        ("series_limit", 0, 1),
    ],
)
def test_each_bound_holds_just_above_and_fails_at_it(key, bad, good):
    assert getattr(_section(url=URL, **{key: good}), key) == good
    with pytest.raises(ConfigError, match=f"remote_write.{key}"):
        _section(url=URL, **{key: bad})


def test_defaults():
    section = _section()
    assert (section.enabled, section.url, section.collector, section.cluster) == (
        False,
        None,
        "",
        "default",
    )
    assert (section.timeout_s, section.interval_s, section.max_sample_age_s) == (5.0, 15.0, 3000.0)
    assert (section.max_pending_samples, section.max_batch_samples) == (500_000, 10_000)
    assert (section.series_limit, section.expire_seconds, section.self_metrics) == (
        2000,
        600.0,
        True,
    )
    assert section.external_labels == {}


@pytest.mark.parametrize("url", ["http://x", "https://x:9090/api/v1/write"])
def test_http_and_https_urls_are_taken(url):
    assert _section(url=url, enabled=True).url == url


@pytest.mark.parametrize(
    "section, message",
    [
        ({"url": "http:///api/v1/write"}, "remote_write.url must be an http\\(s\\) URL"),
        ({"url": "x"}, "remote_write.url must be an http"),
        ({"enabled": True}, "remote_write.url is required when remote_write is enabled"),
        ({"cluster": ""}, "remote_write.cluster"),
        ({"external_labels": {"1x": "v"}}, "'1x' is not a Prometheus label name"),
        ({"external_labels": {"a-b": "v"}}, "'a-b' is not a Prometheus label name"),
        ({"external_labels": {"ok_ä": "v"}}, "is not a Prometheus label name"),
        ({"external_labels": {"__x": "v"}}, "'__x' is not a Prometheus label name"),
        ({"external_labels": {"collector": "v"}}, "set it with remote_write.collector"),
        ({"external_labels": {"cluster": "v"}}, "set it with remote_write.cluster"),
        ({"external_labels": {"region": ""}}, "'region' has an empty value"),
    ],
)
def test_each_rule_fails_naming_its_key(section, message):
    with pytest.raises(ConfigError, match=message):
        _section(**section)


def test_label_names_as_prometheus_takes_them():
    labels = {"_a": "1", "Z9_z": "2", "x_": "3", "a__b": "4"}
    assert _section(url=URL, external_labels=labels).external_labels == labels
    assert _section(enabled=False).url is None  # disabled: no URL needed


def test_the_section_is_frozen():
    section = _section(url=URL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        section.url = "http://elsewhere/api/v1/write"
