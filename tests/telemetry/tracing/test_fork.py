"""A process forked while tracing (a data-loader worker) records its own spans with its own
pid and never writes its parent's again; the parent goes on as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.telemetry.tracing.trace_file import check_fields, read_events

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
import json, os, sys
from dataclasses import dataclass
from telemetry import perf_tracer

@dataclass
class Config:
    enabled: bool = True

perf_tracer.configure(Config(), rank=0, role="trainer", output_dir=sys.argv[1])
for _ in range(100):  # some still queued at the fork
    with perf_tracer.trace_scope("parent.before"):
        pass
pid = os.fork()
if pid == 0:
    with perf_tracer.trace_scope("child.scope"):
        pass
    perf_tracer.save()
    os._exit(0)
_, status = os.waitpid(pid, 0)
with perf_tracer.trace_scope("parent.after"):
    pass
perf_tracer.save()
print(json.dumps({"parent": os.getpid(), "child": pid, "status": status}))
"""


def test_forked_child_traces_itself_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 0
    (path,) = tmp_path.rglob("traces-r0.jsonl")
    events = read_events(path)
    check_fields(events)
    spans = [(e["name"], e["pid"]) for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in events if e["name"] == "child.scope"} == {result["child"]}
    parent, child = result["parent"], result["child"]
    assert sorted(spans) == sorted(
        [("parent.before", parent)] * 100 + [("child.scope", child), ("parent.after", parent)]
    )
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {parent, child}
