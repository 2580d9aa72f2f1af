"""The reliability ledger's reading side: each sink read back with its own reader.

A run's committed steps (what the trainer's ``commit`` returned for) are looked up in
TensorBoard (``EventAccumulator``), in every W&B offline part of the run (``wandb leet
inspect``, W&B's own reader) and in a real Prometheus fed by the collector's remote write
(the raw samples of ``ledger_value``). Per sink a step is present once, duplicated (more
than one W&B row, TensorBoard event or Prometheus sample) or lost.
"""

from __future__ import annotations

import glob
import json
import math
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.collector.test_integration import read_tensorboard
from tests.wandb_log import inspect_wandb

KEY = "ledger/value"  # the trainer logs the step number as this key's value
PROM_NAME = "ledger_value"

__all__ = [
    "KEY",
    "Ledger",
    "out_of_order",
    "prometheus_steps",
    "prometheus_times",
    "refused_by_sink",
    "tensorboard_steps",
    "wandb_rows",
    "wandb_steps",
]


@dataclass
class Ledger:
    """One sink's tally over a scenario's runs."""

    acknowledged: int = 0
    once: int = 0
    duplicated: int = 0
    lost: int = 0
    extra: int = 0  # present, never acknowledged (the step a killed trainer handed over)

    def add(self, acknowledged: list[int], found: Counter) -> None:
        """Count one run in: ``found`` is how often the sink holds each step."""
        self.acknowledged += len(acknowledged)
        for step in acknowledged:
            times = found.get(step, 0)
            self.once += times == 1
            self.duplicated += times > 1
            self.lost += times == 0
        self.extra += len(set(found) - set(acknowledged))

    def row(self, scenario: str, sink: str) -> str:
        """One markdown table row."""
        cells = (self.acknowledged, self.once, self.duplicated, self.lost, self.extra)
        return f"| {scenario} | {sink} | " + " | ".join(str(cell) for cell in cells) + " |"


def tensorboard_steps(run_dir: Path) -> Counter:
    """How many ``ledger/value`` events each step has in the run's TensorBoard files."""
    if not run_dir.exists():
        return Counter()
    events = read_tensorboard(run_dir)
    if KEY not in events.Tags().get("scalars", []):
        return Counter()
    return Counter(event.step for event in events.Scalars(KEY))


def wandb_steps(run_dir: Path) -> Counter:
    """How many history rows of the run's offline parts hold each training step: every row
    with a ``global_step`` counts, whatever keys it holds (a replay that logs only some
    keys again is a second row), and a row whose ``_step`` differs from its ``global_step``
    counts twice (W&B's step axis is off from there on)."""
    found: Counter = Counter()
    for part in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb"))):
        for record in inspect_wandb(part):
            if record["type"] != "history":
                continue
            row = record["history"]["item"]
            if "global_step" in row:
                step = int(row["global_step"])
                found[step] += 1 if row.get("_step") == step else 2
    return found


def wandb_rows(run_dir: Path, steps: list[int]) -> list[dict]:
    """The history rows (``_step`` and keys) of the run's offline parts holding ``steps``:
    where a duplicated step's second row came from."""
    return [
        {"part": Path(part).parent.name, "_step": row.get("_step"), "keys": sorted(row)}
        for part in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb")))
        for record in inspect_wandb(part)
        if record["type"] == "history"
        for row in [record["history"]["item"]]
        if int(row.get("global_step", -1)) in steps
    ]


def prometheus_steps(url: str, trial: str, want: int, timeout_s: float = 30.0) -> Counter:
    """How many raw ``ledger_value`` samples of ``trial`` hold each step (its value), once
    ``want`` distinct steps arrived or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = _samples(url, trial)
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _samples(url: str, trial: str) -> Counter:
    return Counter(step for step, _ in _timed_samples(url, trial))


def prometheus_times(url: str, trial: str, steps: list[int]) -> dict[int, list[float]]:
    """The timestamps (Unix seconds) of the raw samples holding each of ``steps``: where a
    duplicated step's second sample came from (a replay at its commit time, or later)."""
    times: dict[int, list[float]] = {step: [] for step in steps}
    for step, at in _timed_samples(url, trial):
        if step in times:
            times[step].append(at)
    return times


def _timed_samples(url: str, trial: str) -> list[tuple[int, float]]:
    query = f'{PROM_NAME}{{trial="{trial}"}}[1d]'
    params = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=10) as answer:
        body = json.load(answer)
    return [
        (int(float(value)), float(at))
        for series in body["data"]["result"]
        for at, value in series["values"]
        if math.isfinite(float(value))  # a staleness marker is NaN
    ]


def out_of_order(url: str) -> int:
    """Samples Prometheus refused as out of order so far (its own counter, every type; a
    sample the remote-write sink sends again in a smaller part is counted at each try)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("prometheus_tsdb_out_of_order_samples_total")
        )
    )


def refused_by_sink(metrics_url: str) -> int:
    """Samples a collector's remote-write sink counted refused (each once: the receiver
    refused it alone), from the collector's ``/metrics``."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    name = 'rltel_collector_remote_write_samples_dropped_total{reason="refused"}'
    return int(
        sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
    )
