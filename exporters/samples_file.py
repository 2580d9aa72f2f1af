"""``<run_dir>/samples.jsonl``: every kept rollout sample, one JSON object a line.

Each line holds ``step`` (the commit's ``global_step``), ``stream`` and the sample's
fields (text, then numbers; a non-finite number is ``null``), and ``truncated`` (the names
of the fields cut at the limit) when there are any. Processes of one run append to the
same file, a whole step in one ``write`` to a file opened for appending.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from exporters.base import RunSink
from exporters.local_files import writable_dir
from exporters.sample_views import sample_line
from telemetry.model.snapshot import Snapshot

SAMPLES_FILE = "samples.jsonl"


class SamplesFileSink(RunSink):
    """Appends each snapshot's samples to ``<run_dir>/samples.jsonl`` (created when the
    first sample comes); snapshots without samples write nothing.

    Args:
        run_dir: the run directory (:attr:`telemetry.config.StatsLoggerConfig.run_dir`).
    """

    name = "samples"

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._run_dir = Path(run_dir)
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """The JSONL file."""
        return self._run_dir / SAMPLES_FILE

    def _active(self) -> bool:
        return True

    def _write(self, snapshot: Snapshot) -> None:
        if not snapshot.samples:
            return
        if self._fd is None:
            writable_dir(self._run_dir)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        step = snapshot.step.global_step if snapshot.step is not None else None
        text = "".join(
            json.dumps(sample_line(step, sample), ensure_ascii=False) + "\n"
            for sample in snapshot.samples
        )
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data) :]

    def _finish(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
