"""``<run_dir>/samples.jsonl``: every kept rollout sample, one JSON object a line.

Each line holds ``step`` (the commit's ``global_step``), ``stream`` and the sample's
fields (text, then numbers; a non-finite number is ``null``), and ``truncated`` (the names
of the fields cut at the limit) when there are any. Processes of one run append to the
same file, a whole step in one ``write`` to a file opened for appending.

Idempotent in the collector (:meth:`SamplesFileSink.skip_held_steps`): the sink reads the
lines already in the file and skips the samples of a (step, stream) the file (or this sink)
already holds, so a replay of the collector's durable queue never writes a step's samples
twice.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from exporters.base import RunSink
from exporters.local_files import writable_dir
from exporters.sample_views import sample_line
from telemetry.model.snapshot import Snapshot

logger = logging.getLogger(__name__)

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
        self._held: set[tuple[int | None, str]] | None = None  # None: no skips
        self._torn = False  # the file ends in a killed writer's torn line

    @property
    def path(self) -> Path:
        """The JSONL file."""
        return self._run_dir / SAMPLES_FILE

    def _active(self) -> bool:
        return True

    def skip_held_steps(self) -> None:
        """From now on skip the samples of a (step, stream) the file (or this sink) already
        holds: a replay never writes a step's samples twice. A file that cannot be read is
        logged, and its steps may be written again."""
        held, torn = set(), False
        try:
            held, torn = held_steps(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("samples: cannot read %s: %s", self.path, exc)
        with self._lock:
            self._held, self._torn = held, torn  # torn: the next write starts a new line

    def _write(self, snapshot: Snapshot) -> None:
        step = snapshot.step.global_step if snapshot.step is not None else None
        samples = snapshot.samples
        if self._held is not None and step is not None:
            held = self._held
            samples = tuple(sample for sample in samples if (step, sample.stream) not in held)
            held.update((step, sample.stream) for sample in samples)
        if not samples:
            return
        if self._fd is None:
            writable_dir(self._run_dir)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        text = "\n" if self._torn else ""
        text += "".join(
            json.dumps(sample_line(step, sample), ensure_ascii=False) + "\n" for sample in samples
        )
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data) :]
        self._torn = False

    def _finish(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def held_steps(path: Path) -> tuple[set[tuple[int | None, str]], bool]:
    """The (step, stream) pairs ``path`` holds samples of, and whether it ends in a torn
    line (a killed writer's), which is left out like any unreadable line.

    Raises:
        OSError: the file cannot be read.
    """
    held: set[tuple[int | None, str]] = set()
    unreadable, line = 0, b"\n"
    with path.open("rb") as lines:
        for line in lines:
            try:
                row = json.loads(line)
                held.add((row["step"], row["stream"]))
            except (ValueError, KeyError, TypeError):
                unreadable += 1
    if unreadable:
        logger.warning("samples: %d unreadable lines in %s left out", unreadable, path)
    return held, not line.endswith(b"\n")
