"""One run's Chrome trace event file, written incrementally, valid JSON after every write.

The file is the trace event format's JSON object form, one event a line::

    {"displayTimeUnit":"ms","otherData":{...},"traceEvents":[
    {"name":"process_name","ph":"M",...}
    ,{"name":"generate","ph":"X",...}
    ]}

Each :meth:`ChromeTraceFile.append` writes its events where the closing ``]}`` was and the
closing ``]}`` after them, then flushes, so a reader (Perfetto, ``chrome://tracing``, the
report) finds a whole JSON document after every append and after a stop; nothing of a run
is held in memory. A part holds ``rotate_steps`` training steps: when an event of a step
past the part arrives, ``trace.json`` is renamed ``trace.steps-<first>-<last>.json`` (steps
zero-padded to 8 digits; ``.1``, ``.2``... before ``.json`` if that name is taken) and a new
``trace.json`` begins, naming its processes and threads again. A ``trace.json`` found at start (a
restarted collector) is read line by line for its first step and its span ids (a replayed
request's spans already there are not written again) and appended to; one that
does not end with ``]}`` (a collector killed mid-write) is renamed
``trace.unfinished-<unix ns>.json`` and left as it is.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from collector.traces.events import dumps

__all__ = ["CURRENT", "ChromeTraceFile", "part_name"]

logger = logging.getLogger(__name__)

CURRENT = "trace.json"
TAIL = b"\n]}\n"


def part_name(first_step: int, rotate_steps: int) -> str:
    """The name of a finished part holding steps ``first_step`` to ``+ rotate_steps - 1``."""
    return f"trace.steps-{first_step:08d}-{first_step + rotate_steps - 1:08d}.json"


class ChromeTraceFile:
    """The current part of one run's merged trace, its rotation and its process names.

    Args:
        directory: the run directory.
        rotate_steps: training steps per part.
        run: the run's name, kept in the file's ``otherData``.

    Raises:
        OSError: from :meth:`append` when the directory or file cannot be written.
    """

    def __init__(self, directory: Path, rotate_steps: int, run: str) -> None:
        self.directory = directory
        self.rotate_steps = rotate_steps
        self.run = run
        self.path = directory / CURRENT
        self.first_step: int | None = None  # the first step of the current part
        self.parts = 0  # parts finished by this writer
        self._file: IO[bytes] | None = None
        self._end = 0  # where the tail begins
        self._events = 0
        self._named: set[tuple[str, int, int]] = set()  # metadata this part holds
        self.resumed_spans: set[str] = set()
        """Span ids (hex) of a resumed ``trace.json``: a replay of the durable queue (after
        a crash, what was not acknowledged) skips them instead of writing them twice."""

    def part_of(self, step: int) -> int:
        """The first step of the part that ``step`` belongs to."""
        return step - step % self.rotate_steps

    def append(
        self,
        events: Iterable[dict[str, Any]],
        metadata: Iterable[dict[str, Any]] = (),
        step: int | None = None,
    ) -> None:
        """Write ``events`` (rotating first when ``step`` is past the current part), each of
        the ``metadata`` events (``process_name``, ``thread_name``...) this part does not
        hold yet before them, then the closing ``]}``; flushed."""
        if (
            step is not None
            and self.first_step is not None
            and self.part_of(step) > self.first_step
        ):
            self.rotate()
        self.open()
        if step is not None and self.first_step is None:
            self.first_step = self.part_of(step)
        lines = []
        for event in metadata:
            key = (event["name"], event["pid"], event.get("tid", 0))
            if key not in self._named:
                self._named.add(key)
                lines.append(dumps(event))
        lines.extend(dumps(event) for event in events)
        if not lines:
            return
        body = (b"\n," if self._events else b"\n") + b"\n,".join(lines)
        self._events += len(lines)
        file = self._file
        file.seek(self._end)
        file.write(body)
        self._end = file.tell()
        file.write(TAIL)
        file.truncate()
        file.flush()

    def rotate(self) -> None:
        """Finish the current part under its step range's name; the next append begins anew."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        first = self.first_step if self.first_step is not None else 0
        target = self.directory / part_name(first, self.rotate_steps)
        n = 0
        while target.exists():
            n += 1
            target = target.with_name(f"{part_name(first, self.rotate_steps)[:-5]}.{n}.json")
        os.replace(self.path, target)
        self.parts += 1
        self.first_step = None
        self._named.clear()
        self.resumed_spans = set()

    def close(self) -> None:
        """Close the current part; it stays ``trace.json``, whole. Safe twice."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def open(self) -> None:
        """Open the current part (resume a whole ``trace.json``); nothing if open."""
        if self._file is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and not self._resume():
            aside = self.path.with_name(f"trace.unfinished-{time.time_ns()}.json")
            os.replace(self.path, aside)
            logger.warning("traces: %s did not end whole; kept as %s", self.path, aside.name)
        if self._file is not None:
            return
        other = {"run": self.run, "rotate_steps": self.rotate_steps}
        head = f'{{"displayTimeUnit":"ms","otherData":{json.dumps(other)},"traceEvents":['
        self._file = open(self.path, "w+b")  # noqa: SIM115 - held open across appends
        self._file.write(head.encode())
        self._end = self._file.tell()
        self._file.write(TAIL)
        self._file.flush()
        self._events = 0
        self._named.clear()

    def _resume(self) -> bool:
        """Append to a whole ``trace.json`` left by an earlier collector; False if not whole."""
        size = self.path.stat().st_size
        with open(self.path, "rb") as file:
            file.seek(max(0, size - len(TAIL)))
            if file.read() != TAIL:
                return False
            file.seek(0)
            events, first, written = 0, None, set()
            try:
                for number, line in enumerate(file):
                    if number == 0 or line.strip() in (b"]}", b""):
                        continue
                    events += 1
                    args = json.loads(line.lstrip(b",")).get("args", {})
                    step = args.get("step")
                    if isinstance(step, int) and (first is None or step < first):
                        first = step
                    if "span_id" in args:
                        written.add(args["span_id"])
            except ValueError:
                return False
        self._file = open(self.path, "r+b")  # noqa: SIM115 - held open across appends
        self._end = size - len(TAIL)
        self._events = events
        self.resumed_spans = written
        self.first_step = None if first is None else self.part_of(first)
        self._named.clear()
        return True
