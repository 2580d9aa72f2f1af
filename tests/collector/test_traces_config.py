"""The collector's ``traces`` section: defaults, and errors naming the full key."""

from __future__ import annotations

import pytest

from collector.config import from_dict
from collector.traces.config import TracesConfig
from telemetry.model.errors import ConfigError


def test_config_section_and_errors_name_the_key():
    config = from_dict({"traces": {"rotate_steps": 10, "forward": {"endpoint": "127.0.0.1:4317"}}})
    assert config.traces.rotate_steps == 10 and config.traces.forward.enabled
    assert from_dict({}).traces == TracesConfig()
    for bad, key in (
        ({"rotate_steps": 0}, "collector.traces.rotate_steps"),
        ({"duration_buckets": [1.0, 0.5]}, "collector.traces.duration_buckets"),
        ({"forward": {"endpoint": "jaeger"}}, "collector.traces.forward.endpoint"),
        ({"forward": {"headers": {"Authorization": "x"}}}, "collector.traces.forward.headers"),
        ({"merge": True}, "collector.traces.merge"),
    ):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            from_dict({"traces": bad})
