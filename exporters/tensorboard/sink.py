"""TensorBoard bridge: event files written with tensorboard's own writer, no torch.

Scalars go under AReaL's flat keys at ``global_step`` (``simple_value``, as
``SummaryWriter.add_scalar`` writes them). A histogram point with buckets is also written
as a TensorBoard histogram under its key with its real bucket counts (what
``add_histogram_raw`` writes): bucket ``i`` ends at ``bounds[i]``, the last one at
``DBL_MAX``, which TensorBoard replaces with the point's max. ``sum_squares`` is not
tracked by the recording side and is written as 0. MoE per-expert series are left out;
the per-layer summary (``moe_balance/layer_<i>/max_over_ideal``) stays.
A snapshot's kept rollout samples become one text summary per stream, ``samples/<stream>``:
a 2-D string tensor (the column names, then a row per sample) that TensorBoard shows as a
table.

Idempotent in the collector (:meth:`TensorBoardSink.skip_held_steps`): the sink reads the
event files already in its directory (TensorBoard's own record reader) and skips a value
whose tag already has that step or a later one there; a training step, or a step's samples
of a stream (``samples/<stream>``), it wrote itself is skipped the same way. A replay of
the collector's durable queue, or a sender's retry of a request whose answer was lost,
never writes a step twice. (In a training process a resumed
run writes its steps again, as TensorBoard expects of a restart from a checkpoint.)
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

from exporters.base import RunSink
from exporters.local_files import writable_dir
from exporters.moe_tables import flat_without_experts, is_expert_point
from exporters.sample_views import sample_tables, samples_key, text_table
from exporters.steps import StreamSteps
from telemetry.config import StatsLoggerConfig
from telemetry.model.snapshot import Histogram, Snapshot

logger = logging.getLogger(__name__)


class TensorBoardSink(RunSink):
    """Writes Snapshots to one event file under ``config.tensorboard.path``.

    Rollout and eval snapshots are written at their own global step; one without a step
    gets its stream's sequence number (0, 1, ...). TensorBoard keeps out-of-order steps.

    Args:
        config: the stats_logger configuration; ``tensorboard.path`` is the log directory
            (``None`` makes this sink a no-op).
        flush_secs: how often the writer thread flushes on its own.

    Raises:
        ModuleNotFoundError: ``tensorboard`` is not installed.
        OSError: the log directory cannot be created or written.
    """

    name = "tensorboard"

    def __init__(self, config: StatsLoggerConfig, flush_secs: float = 10.0) -> None:
        self._lock = threading.Lock()
        self._writer: Any = None
        self._closed = False
        self._steps = StreamSteps()
        self._held: dict[str, int] | None = None  # tag -> highest step held; None: no skips
        self.logdir: str | None = None
        if config.tensorboard.path is None:
            return
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.plugins.text.summary_v2 import text_pb
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "the TensorBoard sink needs tensorboard: pip install rltel[tensorboard]",
                name="tensorboard",
            ) from exc
        self._event, self._summary, self._text = event_pb2.Event, summary_pb2, text_pb
        self.logdir = writable_dir(config.tensorboard.path)
        self._writer = EventFileWriter(self.logdir, max_queue_size=1000, flush_secs=flush_secs)

    def _active(self) -> bool:
        return self._writer is not None

    def _write(self, snapshot: Snapshot) -> None:
        values = [
            self._summary.Summary.Value(tag=tensorboard_tag(key), simple_value=value)
            for key, value in flat_without_experts(snapshot).items()
        ]
        values.extend(
            self._histogram(point)
            for point in snapshot.points
            if isinstance(point, Histogram)
            and point.bounds
            and point.count > 0
            and point.min is not None
            and point.max is not None
            and not is_expert_point(point)
        )
        for stream, (columns, rows) in sample_tables(snapshot.samples).items():
            values.extend(self._text(samples_key(stream), text_table(columns, rows)).value)
        train_step = snapshot.step.global_step if snapshot.step is not None else None
        if self._held is not None and train_step is not None:
            values = [value for value in values if self._held.get(value.tag, -1) < train_step]
        if not values:
            return
        wall = snapshot.time_unix_nano / 1e9 if snapshot.time_unix_nano else time.time()
        event = self._event(
            wall_time=wall,
            step=self._steps.step_of(snapshot),
            summary=self._summary.Summary(value=values),
        )
        self._writer.add_event(event)
        if self._held is not None and train_step is not None:
            sample_tags = {samples_key(sample.stream) for sample in snapshot.samples}
            self._held.update(
                (value.tag, train_step)
                for value in values
                if snapshot.stream == "train" or value.tag in sample_tags
            )

    def skip_held_steps(self) -> None:
        """From now on skip a value whose tag the directory's event files (or this sink)
        already hold at that step or a later one: a replay never writes a step twice."""
        with self._lock:
            self._held = held_steps(self.logdir) if self.logdir is not None else {}

    def _histogram(self, point: Histogram) -> Any:
        proto = self._summary.HistogramProto(
            min=point.min,
            max=point.max,
            num=point.count,
            sum=point.sum,
            sum_squares=0.0,
            bucket_limit=[*point.bounds, sys.float_info.max],
            bucket=list(point.bucket_counts),
        )
        return self._summary.Summary.Value(tag=tensorboard_tag(point.key), histo=proto)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Write queued events to the file; False when the writer failed."""
        del timeout_s
        with self._lock:
            if self._writer is None or self._closed:
                return True
            try:
                self._writer.flush()
            except Exception:
                logger.exception("tensorboard: flush failed")
                return False
        return True

    def _finish(self) -> None:
        """Flush and close the event file."""
        if self._writer is not None:
            self._writer.close()


def held_steps(logdir: str) -> dict[str, int]:
    """``tag -> highest step`` of the event files in ``logdir`` (an earlier process's),
    read with TensorBoard's record reader; a torn last record (a killed writer) ends a file."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2

    held: dict[str, int] = {}
    for path in sorted(Path(logdir).glob("*tfevents*")):
        try:
            for record in RawEventFileLoader(str(path)).Load():
                event = event_pb2.Event.FromString(record)
                for value in event.summary.value:
                    held[value.tag] = max(held.get(value.tag, event.step), event.step)
        except Exception as exc:  # an unreadable file: its steps may be written again
            logger.warning("tensorboard: cannot read %s: %s", path, exc)
    return held


_NOT_IN_TAGS = re.compile(r"[^-/\w.]")


def tensorboard_tag(key: str) -> str:
    """The tag AReaL's TensorBoard writer (tensorboardX) gives ``key``: characters other than
    letters, digits, ``_``, ``-``, ``/`` and ``.`` become ``_``; leading ``/`` are dropped."""
    return _NOT_IN_TAGS.sub("_", key).lstrip("/")
