"""docs/stack.md's "At scale" recipe is what the VictoriaMetrics tests run: the same server
flags, and collector configs the collector's own schema takes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from collector.config import from_dict
from tests.collector.victoria import FLAGS

STACK = Path(__file__).resolve().parents[2] / "docs" / "stack.md"


def recipe() -> str:
    """The bash block of the "At scale" section."""
    text = STACK.read_text().split("## At scale: several collectors into one store", 1)[1]
    return re.search(r"^```bash\n(.*?)^```$", text, re.M | re.S).group(1)


def test_victoria_metrics_runs_with_the_tests_flags():
    command = recipe().replace("\\\n", " ").split("\n")
    (line,) = [c for c in command if c.startswith("victoria-metrics ")]
    args = shlex.split(line.rstrip(" &"))[1:]
    assert args[:2] == [
        "-storageDataPath=/tmp/rltel-scale/vm-data",
        "-httpListenAddr=127.0.0.1:8428",
    ]
    assert tuple(args[2:]) == FLAGS


def test_each_collector_config_is_valid_and_writes_to_that_server():
    block = recipe()
    template = re.search(r"<<EOF\n(.*?)^EOF$", block, re.M | re.S).group(1)
    labels = []
    for node in ("node-a", "node-b"):
        section = yaml.safe_load(template.replace("$node", node))["collector"]
        config = from_dict(section)
        rw = config.sinks.remote_write
        assert rw.enabled and rw.url == "http://127.0.0.1:8428/api/v1/write"
        labels.append((rw.collector, rw.cluster))
    assert labels == [("node-a", "scale"), ("node-b", "scale")]
    assert "--otlp-port 4317" in block and "--otlp-port 4318" in block
